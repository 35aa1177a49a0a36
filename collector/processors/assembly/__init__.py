"""Trace assembly: groups committed spans by trace, decides when a trace is complete, maps it with
`semconv.map_trace` and writes `traces`, `steps` and `documents`.

- `completeness`: when a trace is ready (its root, an entry span standing in, `decision_wait`,
  `max_wait`, `max_traces`), per trace, as a state machine; pure.
- `holding`: the rows of the traces in flight, in memory, on disk past `max_held_spans`, or left in
  the store; gathered once per span and event, the first copy committed.
- `ready`: the ready queue (at a low rate, waiting `batch_wait` for company), and a chunk of ready
  traces made a mapping job.
- `claims`: what was assembled and how many times, the store's word on traces not remembered,
  replicas' claims, and the search for traces assembled twice.
- `cases`: the golden cases sent with mapping jobs.
- `workers`: the mapping worker processes, or mapping in the assembler thread.
- `writing`: jobs in flight, and the writing of their rows, several jobs a transaction.
- `assembler`: `TraceAssembler`, the thread that ties them together, and recovery.

Nothing is imported here: a mapping worker process imports only what its job needs.
"""
