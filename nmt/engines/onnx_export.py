"""``nmt-export --with onnx``: the encoder and one decoder step (nmt.engines.step) as two ONNX graphs with every
size dynamic (sentences, beams, source length, cache length), and an engine.json that says how to run them.

    onnx/encoder.onnx       EncoderForExport: src_tokens -> encoder_out, encoder_padding, cross keys/values
    onnx/decoder_step.onnx  DecoderStep: tokens, positions, encoder_padding, cache -> log_probs, new self cache
    onnx/engine.json        names, sizes, the model config, and what the graphs were checked against
    onnx/*.int8.onnx        with ``int8``: the same graphs with int8 weights (``--quantize int8``)

Written with torch's TorchScript exporter (``dynamo=False``: it needs no onnxscript, and traces the step's
plain tensor arithmetic as it is), opset 17 (LayerNormalization as one operator). Before the files count as
written, onnxruntime runs both graphs on inputs of other sizes than the traced ones and must give the torch
step's outputs: a graph that fixed a size while tracing is refused at export, not found at translation.

The int8 graphs are onnxruntime's dynamic quantization of the fp32 ones: every product with a weight matrix takes
int8 weights (a scale per output channel) and quantizes its activations as it runs. A step then reads a quarter of
the fp32 weight bytes, which is what a lone sentence's steps are bound by; their log-probabilities differ from fp32
by quantization's rounding, so the check at export bounds the difference loosely (gross errors, not roundings).
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import Tensor, nn

from nmt.engines.step import (
    DecoderStep,
    EncoderForExport,
    check_exportable,
    decoder_layers,
    encoder_names,
    shares_encoder_rows,
    step_names,
)
from nmt.errors import NmtError, UsageError
from nmt.models.transformer import TransformerModel

OPSET = 17
FORMAT_VERSION = 1
ENCODER_FILE = "encoder.onnx"
STEP_FILE = "decoder_step.onnx"
ENGINE_FILE = "engine.json"
CHECK_TOLERANCE = 1e-4  # ONNX vs torch at export: the same fp32 arithmetic, other kernels (observed: ~1e-6)
INT8_TOLERANCE = 1.0  # int8 graphs vs torch: a gross error, not rounding (a log-probability off by a nat or more)
INT8_SUFFIX = ".int8.onnx"


def need_onnx(what: str) -> None:
    """Refuse in one line when the onnx packages are missing."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        raise UsageError(f"{what} needs the onnx and onnxruntime packages: pip install 'nmt[onnx]'") from None


def example_sources(model: TransformerModel, rows: int, length: int, seed: int) -> Tensor:
    """(rows, length) source ids (not specials), the first row shorter (right-padded): traced or checked inputs."""
    pad = model.encoder.pad
    vocab = model.encoder.embed_tokens.num_embeddings
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(min(4, vocab - 1), vocab, (rows, length), generator=g)
    src[0, length // 2 + 1:] = pad
    return src


def step_inputs(step: DecoderStep, encoded: Sequence[Tensor], group: int, t: int, seed: int) -> list[Tensor]:
    """Inputs of the step for ``encoded`` (the encoder's outputs, b rows), ``group`` rows per encoder row and ``t``
    cached positions (random keys and values: the step treats them as any others; a plugin that keeps a window
    masks what lies before it). When the step masks left pads, rows own from all to none of the cached positions
    (each row's position), as rows that joined a running search later do."""
    padding, cross = encoded[1], encoded[2:]
    b = padding.size(0)
    g = torch.Generator().manual_seed(seed)
    vocab = step.model.decoder.embed_tokens.num_embeddings
    tokens = torch.randint(min(4, vocab - 1), vocab, (b, group), generator=g)
    positions = torch.full((b, group), t)
    if step.masks_left_pads:
        positions = positions - torch.arange(b * group).remainder(t + 1).view(b, group)
    inputs = [tokens, positions, padding]
    for i in range(len(cross) // 2):
        k, v = cross[2 * i], cross[2 * i + 1]
        H = k.size(1)
        inputs += [torch.randn(b, group, H, t, k.size(3), generator=g),
                   torch.randn(b, group, H, t, v.size(3), generator=g), k, v]
    return inputs


def _dynamic_axes(inputs: list[str], outputs: list[str]) -> dict[str, dict[int, str]]:
    """Every size of the step's and the encoder's tensors that changes from call to call."""
    axes: dict[str, dict[int, str]] = {}
    for name in [*inputs, *outputs]:
        if name == "src_tokens" or name == "encoder_padding":
            axes[name] = {0: "sentences", 1: "source_length"}
        elif name == "encoder_out":
            axes[name] = {0: "sentences", 1: "source_length"}
        elif name.startswith("cross_"):
            axes[name] = {0: "sentences", 2: "source_length"}
        elif name in ("tokens", "positions", "log_probs"):
            axes[name] = {0: "sentences", 1: "rows_per_sentence"}
        elif name.startswith("self_"):
            axes[name] = {0: "sentences", 1: "rows_per_sentence", 3: "cache_length"}
        elif name.startswith("new_self_"):
            axes[name] = {0: "sentences", 1: "rows_per_sentence", 3: "new_cache_length"}
    return axes


def _export(module: nn.Module, args: tuple[Tensor, ...], path: Path, inputs: list[str], outputs: list[str]) -> None:
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the tracer's notes on Python values it fixes: the step has none it needs
        torch.onnx.export(module, args, str(path), input_names=inputs, output_names=outputs,
                          dynamic_axes=_dynamic_axes(inputs, outputs), opset_version=OPSET, dynamo=False,
                          do_constant_folding=True)


def _check(session: Any, module: nn.Module, args: Sequence[Tensor], names: list[str], what: str,
           tolerance: float = CHECK_TOLERANCE) -> None:
    """onnxruntime's outputs for ``args`` must be the torch module's (floats within ``tolerance``)."""
    with torch.no_grad():
        expected = module(*args)
    try:
        got = session.run(None, {name: x.numpy() for name, x in zip(names, args)})
    except Exception as e:  # onnxruntime's own error types: a shape the graph fixed while tracing
        raise NmtError(f"the ONNX {what} fails on inputs of other sizes than the traced ones ({type(e).__name__}); "
                       "a plugin decides on a size in Python (nmt.models.attention.AttentionBase.exportable); "
                       "translate with --engine torch") from None
    for name, want, have in zip(session.get_outputs(), expected, got):
        if tuple(have.shape) != tuple(want.shape):
            raise NmtError(f"the ONNX {what} gives {name.name} of shape {tuple(have.shape)} where the model gives "
                           f"{tuple(want.shape)}: a size was fixed while tracing; export with --with compiled or "
                           "translate with --engine torch")
        if want.is_floating_point():
            diff = float((torch.from_numpy(have) - want).abs().max()) if want.numel() else 0.0
            if not diff <= tolerance:
                fix = ("export with --onnx-precision float32" if tolerance > CHECK_TOLERANCE
                       else "translate with --engine torch")
                raise NmtError(f"the ONNX {what} differs from the model by {diff:.3g} in {name.name}; {fix}")
        elif not torch.equal(torch.from_numpy(have), want):
            raise NmtError(f"the ONNX {what} differs from the model in {name.name}; translate with --engine torch")


def export_onnx(model: nn.Module, out_dir: str | Path, int8: bool = False) -> Path:
    """Write ``out_dir``/encoder.onnx, decoder_step.onnx and engine.json for ``model`` (a TransformerModel in
    fp32; refused in one line when a plugin cannot be exported: nmt.engines.step.check_exportable), checked with
    onnxruntime, and with ``int8`` also their int8 graphs (module docstring); returns ``out_dir``."""
    need_onnx("nmt-export --with onnx")
    import onnxruntime as ort

    model = check_exportable(model)
    if any(p.dtype != torch.float32 for p in model.parameters()):
        raise UsageError("--with onnx: export the model in float32 (the ONNX engine runs fp32)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    try:
        _write(model, out, ort, int8)
    except BaseException:
        for name in (ENCODER_FILE, STEP_FILE, ENGINE_FILE, *map(int8_file, (ENCODER_FILE, STEP_FILE))):
            # nothing half-written is left behind
            (out / name).unlink(missing_ok=True)
        raise
    return out


def int8_file(name: str) -> str:
    """The int8 graph's file beside the fp32 graph ``name``."""
    return name.removesuffix(".onnx") + INT8_SUFFIX


def _quantize(src: Path, dst: Path) -> None:
    """``dst``: the graph ``src`` with int8 weights, one scale per output channel (module docstring)."""
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    class _NoAdvice(logging.Filter):  # its advice to pre-process the graph (shape inference) is not the user's
        def filter(self, record: logging.LogRecord) -> bool:
            return "pre-processing" not in record.getMessage()

    root = logging.getLogger()
    quiet = _NoAdvice()
    root.addFilter(quiet)
    try:
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul", "Gemm"])
    finally:
        root.removeFilter(quiet)


def _write(model: TransformerModel, out: Path, ort: Any, int8: bool) -> None:
    encoder, step = EncoderForExport(model), DecoderStep(model)
    layers = step.layers
    enc_in, enc_out = encoder_names(layers)
    step_in, step_out = step_names(layers)
    with torch.no_grad():
        src = example_sources(model, rows=2, length=5, seed=0)  # sizes >= 2: none is taken for a broadcast
        encoded = encoder(src)
        traced = step_inputs(step, encoded, group=3, t=4, seed=1)
    _export(encoder, (src,), out / ENCODER_FILE, enc_in, enc_out)
    _export(step, tuple(traced), out / STEP_FILE, step_in, step_out)

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    graphs = {"": (ENCODER_FILE, STEP_FILE)}
    if int8:
        for name in (ENCODER_FILE, STEP_FILE):
            _quantize(out / name, out / int8_file(name))
        graphs["int8 "] = (int8_file(ENCODER_FILE), int8_file(STEP_FILE))
    for kind, files in graphs.items():
        sessions = [ort.InferenceSession(str(out / name), options, providers=["CPUExecutionProvider"])
                    for name in files]
        tolerance = INT8_TOLERANCE if kind else CHECK_TOLERANCE
        with torch.no_grad():
            for rows, length, group, t in ((1, 1, 1, 0), (3, 7, 5, 9)):  # one sentence at its first step; a batch
                src = example_sources(model, rows, length, seed=rows)
                _check(sessions[0], encoder, (src,), enc_in, f"{kind}encoder", tolerance)
                _check(sessions[1], step, step_inputs(step, encoder(src), group, t, seed=t), step_in,
                       f"{kind}decoder step", tolerance)

    attn = decoder_layers(model)[0].self_attn
    record: dict[str, Any] = {
        "engine": "onnxruntime", "format_version": FORMAT_VERSION, "opset": OPSET,
        "encoder": {"file": ENCODER_FILE, "inputs": enc_in, "outputs": enc_out},
        "decoder_step": {"file": STEP_FILE, "inputs": step_in, "outputs": step_out},
        "layers": layers, "heads": attn.num_heads, "key_dim": attn.key_dim, "value_dim": attn.head_dim,
        "vocabulary": model.decoder.embed_tokens.num_embeddings,
        "shares_encoder_rows": shares_encoder_rows(model), "merges_rows": step.masks_left_pads,
        "precision": "float32", "torch": torch.__version__, "onnxruntime_checked": ort.__version__,
        "model_config": dataclasses.asdict(model.cfg),
    }
    if int8:  # the same inputs and outputs (an nmt that predates int8 graphs reads the record and ignores them)
        record["int8"] = {"encoder": {"file": int8_file(ENCODER_FILE)}, "decoder_step": {"file": int8_file(STEP_FILE)}}
    (out / ENGINE_FILE).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
