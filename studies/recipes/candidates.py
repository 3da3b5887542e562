"""The candidate recipes of the search: the reference recipe (studies/reference.py, 500 warmup updates,
4,096-token batches) with a few flags changed, and the two-model ensembles."""

from __future__ import annotations

# Wu et al. 2021's Multi30k Transformer-Tiny (4+4 layers, d_model 128, d_ff 256, lr 5e-3, warmup 2,000; their
# 41.0 tokenized lowercased BLEU came from up to 8,000 updates): a quarter of the FLOPs per token of ours
TINY_4X128 = ("--encoder-layers", "4", "--decoder-layers", "4", "--encoder-embed-dim", "128", "--decoder-embed-dim",
              "128", "--encoder-ffn-embed-dim", "256", "--decoder-ffn-embed-dim", "256", "--lr", "5e-3",
              "--warmup-updates", "2000")
PRE_NORM_LR_2E3 = ("--encoder-normalize-before", "--decoder-normalize-before", "--lr", "2e-3")
TOKENS_1024 = ("--max-tokens", "1024")
# the 15-minute winner before label smoothing 0.2 and relative positions joined it (examples/multi30k_cpu.yaml)
QUICKSTART_CPU = (*PRE_NORM_LR_2E3, *TOKENS_1024, "--dropout", "0.2")


def cosine(period_updates: int) -> tuple[str, ...]:
    """A half-cosine from the peak to 0 over ``period_updates`` after the warmup: fitted to a budget, the learning rate
    anneals within it, where inverse_sqrt ends 30 minutes at 0.26x the peak."""
    return ("--lr-scheduler", "cosine", "--lr-period-updates", str(period_updates))


def width(d_model: int) -> tuple[str, ...]:
    """Both sides' model width ``d_model`` with their FFNs at four times it (the paper's ratio)."""
    return ("--encoder-embed-dim", str(d_model), "--decoder-embed-dim", str(d_model),
            "--encoder-ffn-embed-dim", str(4 * d_model), "--decoder-ffn-embed-dim", str(4 * d_model))


LS_0_2 = ("--label-smoothing", "0.2")
# the cosine's periods: a 2-core CPU without AMX makes about 7,300 (3,600) updates of QUICKSTART_CPU in 30 (15)
# minutes, one with AMX about 9,300 in 30, where a cosine ending at 7,300 would leave the last fifth of the budget at
# a learning rate of 0
COSINE_30MIN, COSINE_15MIN, COSINE_30MIN_AMX = cosine(6800), cosine(3100), cosine(8800)
BEST_30MIN = (*QUICKSTART_CPU, *COSINE_30MIN, *LS_0_2)
BEST_30MIN_AMX = (*QUICKSTART_CPU, *COSINE_30MIN_AMX, *LS_0_2)
# Shaw et al.'s relative-position self-attention in place of the sinusoids (the ablation study's attention row); with
# BEST_30MIN_AMX the best found (the 30-minute recipe file until warmup-stable-decay replaced it)
RELATIVE = ("--attention", "relative", "--max-relative-position", "16", "--positional", "none")
# the quickstart's recipe since 2026-11-28 (examples/multi30k_cpu.yaml) as flags on the reference recipe
MULTI30K_CPU = (*QUICKSTART_CPU, *LS_0_2, *RELATIVE)
# ... with the warmup-stable-decay schedule it has had since (the base of issue 62's candidates; d_model 256)
MULTI30K_CPU_WSD = (*MULTI30K_CPU, "--lr-scheduler", "wsd")
# ... and d_model 192: examples/multi30k_cpu.yaml as flags since a fresh-clone quickstart confirmed the width
MULTI30K_CPU_D192 = (*MULTI30K_CPU_WSD, *width(192))
# name -> the flags that change the reference recipe (the ensembles: two models, see ENSEMBLES)
CANDIDATES: dict[str, tuple[str, ...]] = {
    "quickstart": (),
    "ensemble": (),
    "ensemble_side_by_side": (),
    "lr_2e-3": ("--lr", "2e-3"),
    "warmup_250": ("--warmup-updates", "250"),
    "pre_norm_lr_2e-3": PRE_NORM_LR_2E3,
    "pre_norm_lr_2e-3_tokens_1024": (*PRE_NORM_LR_2E3, *TOKENS_1024),
    "pre_norm_lr_2e-3_tokens_1024_dropout_0.2": QUICKSTART_CPU,
    "pre_norm_lr_2e-3_tokens_1024_dropout_0.2_cosine_6800": (*QUICKSTART_CPU, *COSINE_30MIN),
    "pre_norm_lr_2e-3_tokens_1024_dropout_0.2_cosine_3100": (*QUICKSTART_CPU, *COSINE_15MIN),
    # the ablation study's eps_ls 0.2 was 1.2 BLEU above the base after 3,000 updates (row D), and a 30-minute run
    # converges: on top of the best 30-minute recipe so far
    "pre_norm_lr_2e-3_tokens_1024_dropout_0.2_cosine_6800_ls_0.2": BEST_30MIN,
    # relative-position self-attention had the ablation study's lowest dev perplexity (5.43 against 5.75) and +1.1 BLEU
    # (p = 0.073) after 3,000 updates (the attention row): on top of the best recipe so far
    "pre_norm_lr_2e-3_tokens_1024_dropout_0.2_cosine_6800_ls_0.2_relative": (*BEST_30MIN, *RELATIVE),
    # the two above with the cosine fitted to a CPU with AMX
    "pre_norm_lr_2e-3_tokens_1024_dropout_0.2_cosine_8800_ls_0.2": BEST_30MIN_AMX,
    "pre_norm_lr_2e-3_tokens_1024_dropout_0.2_cosine_8800_ls_0.2_relative": (*BEST_30MIN_AMX, *RELATIVE),
    # the two changes of the best 30-minute recipe that need no fitting to the machine, for the 15-minute quickstart
    "pre_norm_lr_2e-3_tokens_1024_dropout_0.2_ls_0.2_relative": (*QUICKSTART_CPU, *LS_0_2, *RELATIVE),
    # schedules that follow the budget (issue 62): the learning rate reaches 0 as --stop-time-hours runs out on any
    # CPU, where inverse_sqrt ends 15 minutes at about 0.37x its peak and the half-cosine fitted to an update count
    # lost 1.7 valid BLEU at 15 minutes by holding the peak too long
    "multi30k_cpu": MULTI30K_CPU,
    "multi30k_cpu_linear": (*MULTI30K_CPU, "--lr-scheduler", "linear"),
    "multi30k_cpu_wsd": MULTI30K_CPU_WSD,
    "multi30k_cpu_cosine_budget": (*MULTI30K_CPU, "--lr-scheduler", "cosine_budget"),
    # the moving average of the weights in place of averaging checkpoints
    "multi30k_cpu_linear_ema": (*MULTI30K_CPU, "--lr-scheduler", "linear", "--ema-decay", "0.999"),
    "multi30k_cpu_wsd_ema": (*MULTI30K_CPU_WSD, "--ema-decay", "0.999"),
    # the serving recipe (issue 62): a deep encoder and a one-layer decoder (Kasai et al. 2021) run a lone sentence's
    # steps through a third of the decoder layers, at about the same training cost per token
    "multi30k_cpu_wsd_6_1": (*MULTI30K_CPU_WSD, "--encoder-layers", "6", "--decoder-layers", "1"),
    "multi30k_cpu_wsd_4_2": (*MULTI30K_CPU_WSD, "--encoder-layers", "4", "--decoder-layers", "2"),
    # issue 62's next candidates on top of the quickstart's recipe: cheap regularizers that cost no
    # compute per update; twice the batch with the rate scaled by its square root (half the updates, steadier ones);
    # a higher peak, which warmup-stable-decay holds for 80% of the budget; a longer cooldown (the README's
    # "3,500 updates" section and the one after it: none beat the recipe; the batch not run)
    "multi30k_cpu_wsd_attention_activation_dropout_0.1": (*MULTI30K_CPU_WSD, "--attention-dropout", "0.1",
                                                          "--activation-dropout", "0.1"),
    "multi30k_cpu_wsd_tokens_2048_lr_2.8e-3": (*MULTI30K_CPU_WSD, "--max-tokens", "2048", "--lr", "2.8e-3"),
    "multi30k_cpu_wsd_lr_3e-3": (*MULTI30K_CPU_WSD, "--lr", "3e-3"),
    # 3e-3 learned far more slowly, and a shorter warmup to 2e-3 lost too: a lower peak (lost 0.4 at 3,500 updates)
    "multi30k_cpu_wsd_lr_1.5e-3": (*MULTI30K_CPU_WSD, "--lr", "1.5e-3"),
    "multi30k_cpu_wsd_cooldown_0.4": (*MULTI30K_CPU_WSD, "--cooldown-fraction", "0.4"),
    # word dropout (--word-dropout): a whole input token's embedding zeroed in training, on both sides
    "multi30k_cpu_wsd_word_dropout_0.1": (*MULTI30K_CPU_WSD, "--word-dropout", "0.1"),
    # a shorter warmup: 500 updates are a seventh of a 15-minute run on a CPU without AMX
    "multi30k_cpu_wsd_warmup_250": (*MULTI30K_CPU_WSD, "--warmup-updates", "250"),
    # narrower models (issue 62: width for tokens per second on 2 cores): fewer FLOPs per token, so more updates in
    # the same minutes; the heads and the FFN's 4x kept (d192: +0.9 valid BLEU over two seeds at 15 minutes' worth
    # of updates; the README's "15 minutes' worth of updates" section); d192 is examples/multi30k_cpu.yaml since a
    # fresh-clone quickstart confirmed it (the README's "from a fresh clone" section)
    "multi30k_cpu_wsd_d192": MULTI30K_CPU_D192,
    "multi30k_cpu_wsd_d128": (*MULTI30K_CPU_WSD, *width(128)),
    # on a CPU that makes 18,000 updates of d192 in 30 minutes the second 15 minutes brought nothing, the valid loss
    # flat while the rate was held at its peak (the README's "from a fresh clone" section): more dropout at 30 minutes
    "multi30k_cpu_wsd_d192_dropout_0.3": (*MULTI30K_CPU_D192, "--dropout", "0.3"),
    # ... and dropout that follows the epochs instead, one recipe for every CPU: 0.2 up to epoch 10, rising to 0.3 at
    # epoch 30 (a 15-minute run makes 7 epochs on the slowest CPU measured, 18 on the fastest; 30 minutes 15 to 37).
    # Run through the quickstart (the README's "Dropout that follows the epochs" section): -0.35 valid BLEU at 15
    # minutes, +0.1 at 30, not taken
    "multi30k_cpu_wsd_d192_dropout_rising": (*MULTI30K_CPU_D192, "--dropout-final", "0.3"),
    "pre_norm_lr_2e-3_tokens_1024_dropout_0.1": (*PRE_NORM_LR_2E3, *TOKENS_1024, "--dropout", "0.1"),
    "learned_positions": ("--positional", "learned"),
    "dropout_0.2": ("--dropout", "0.2"),
    "label_smoothing_0.2": LS_0_2,
    "tokens_512": ("--max-tokens", "512"),
    "tokens_1024": TOKENS_1024,
    "tokens_2048": ("--max-tokens", "2048"),
    "tokens_8192": ("--max-tokens", "8192"),
    "ensemble_tokens_1024": TOKENS_1024,
    "tiny_4x128": TINY_4X128,
    "tiny_4x128_side_by_side": TINY_4X128,
}

# the ensembles: (the share of the time each of the two models trains, whether they train at the same time)
ENSEMBLES: dict[str, tuple[float, bool]] = {"ensemble": (0.5, False), "ensemble_tokens_1024": (0.5, False),
                                            "ensemble_side_by_side": (1.0, True),
                                            "tiny_4x128_side_by_side": (1.0, True)}
