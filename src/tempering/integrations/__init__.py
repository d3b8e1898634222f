"""Adapters that plug tempering's credit functions and losses into other training frameworks."""
