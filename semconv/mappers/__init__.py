"""One module per source convention. Each reads a span's attributes in its own terms; `semconv.mapping`
composes them in the precedence of reference/semconv.md section 6."""
