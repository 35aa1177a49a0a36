"""Monitoring over stored scores: quality gates, regression detection, and the statistics behind them.

Pure logic over rows that a `Query` returns, so `ragpulse check` gives the same answer through a
running server's SQL API (`--server`) and on the database file (`--db`)."""
