"""The engines a model folder can translate with, beside the eager torch model every one is tested against.

- ``torch``: the model as trained, in eager PyTorch; runs every checkpoint, ensemble and option (--bf16,
  --quantize, --compile, alignments). The reference.
- ``onnxruntime``: the encoder and one decoder step exported to ONNX (``nmt-export --with onnx``), run by
  onnxruntime, fp32 or with int8 weights (``--quantize int8``); nmt's own searches drive the step. Loading runs no
  code from the folder.
- ``compiled``: the same step compiled ahead of time for this CPU and torch version (``--with compiled``,
  torch.export + AOTInductor). A compiled package is native code: it loads only when it was built on this machine
  by this user (a record kept outside the folder) or with ``--trust-compiled``.
- ``ctranslate2``: today's CTranslate2 export (``--with ctranslate2``) run by CTranslate2's own search, with nmt's
  search options mapped onto CTranslate2's.

``auto`` (the default for a model folder) takes the first of ``AUTO_ORDER`` the folder holds that loads here;
docs/engines.md says which to pick and why.
"""

from __future__ import annotations

ENGINE_NAMES = ("torch", "onnxruntime", "compiled", "ctranslate2")
AUTO = "auto"
# nmt-export --with NAME -> the engine that runs it, and the model folder's sub-folder that holds its files
EXPORTS = {"onnx": "onnxruntime", "compiled": "compiled", "ctranslate2": "ctranslate2"}
EXPORT_OF = {engine: name for name, engine in EXPORTS.items()}
# auto's preference, fastest first: a step compiled for this CPU has the least per-operator overhead, then
# onnxruntime's graph (the same step, optimised when loaded); CTranslate2 runs its own search, which cannot
# honour every nmt option, so it comes after both; torch always loads
AUTO_ORDER = ("compiled", "onnxruntime", "ctranslate2", "torch")
