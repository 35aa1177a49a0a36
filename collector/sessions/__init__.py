"""Sessions: the turns of a conversation together (docs/sessions.md). `config` is the `sessions:`
section; `refresher` keeps the `sessions` rows current as turns and scores are written."""
