"""Re-scoring stored traces (`ragpulse rescore`, `POST /api/rescore`): docs/rescore.md."""
