"""One module per source convention. Each reads a span's attributes in its own terms; `semconv.mapping`
composes them in the precedence documented in docs/conventions.md."""
