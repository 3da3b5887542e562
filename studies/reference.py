"""The reference recipe both studies start from: fairseq's Multi30k Transformer (3+3 layers, d_model 256,
4 heads, d_ff 1024, shared embeddings, dropout 0.3, Adam (0.9, 0.98), lr 1e-3 on an inverse-sqrt schedule,
label smoothing 0.1), without a length of training or a save folder (each study sets its own).

It is the recipe the quickstart trained when the studies began, and it stays fixed so that their rows stay
comparable; the quickstart's recipe since then is examples/multi30k_cpu.yaml (the recipe search's winner)."""

BASE_FLAGS = ["--arch", "transformer_tiny", "--encoder-layers", "3", "--decoder-layers", "3",
              "--encoder-embed-dim", "256", "--decoder-embed-dim", "256", "--encoder-ffn-embed-dim", "1024",
              "--decoder-ffn-embed-dim", "1024", "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
              "--share-all-embeddings", "--dropout", "0.3", "--optimizer", "adam", "--adam-betas", "(0.9,0.98)",
              "--lr", "1e-3", "--lr-scheduler", "inverse_sqrt", "--criterion", "label_smoothed_cross_entropy",
              "--label-smoothing", "0.1", "--no-epoch-checkpoints", "--no-progress-bar"]
