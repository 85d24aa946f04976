"""Outbound messages to people: Web Push (`webpush`), chat and mail channels (`channels`), and the
rule that keeps them from becoming an open relay into private networks (`guard`)."""
