"""Engines that embed the SDK: each integration places through the one engine and grants through the ledger."""
