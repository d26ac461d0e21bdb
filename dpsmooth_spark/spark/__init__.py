"""Spark adapters: session defaults, lake I/O and the data pass. No privacy logic lives here."""
