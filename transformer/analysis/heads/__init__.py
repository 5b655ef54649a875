"""The heads one by one: their statistics over a sentence or a corpus, and which of them a translation needs."""
