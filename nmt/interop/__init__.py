"""Bringing models and data from other toolkits into nmt (today: fairseq 0.12)."""
