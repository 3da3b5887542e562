"""Built-in scorers (--scoring): sacrebleu, bleu_lc_tok."""
