"""nmt's CPU speed tricks, in one place.

The model (``nmt/models/``) is the paper's plain code: ``nn.Linear`` layers, ``nn.Dropout`` modules and
``F.linear`` for the output layer. The calls here give a built model the CPU forms of those layers, on the
same parameters, and set the process up:

- :func:`swap_layers` (``model``): nmt-train (before the optimizer is built), nmt-validate, ``--eval-bleu``'s
  CPU replica.
- :func:`for_inference` (``model, bf16, pack``): every command that loads models to translate (nmt-generate,
  nmt-interactive, nmt-serve, ``nmt.load``): ``swap_layers``, bf16 weights, packed weights, fp32 attention caches.
- :func:`process_settings` (``compiled``): once per process, in nmt-train and wherever models are loaded to
  translate; :func:`release_freed_memory`: nmt-serve when idle.

The tricks, and why each pays (each was measured before and after: benchmarks/RESULTS.md):

- **bf16/fp16 products on a few row counts** (``linear.py``: ``BucketedLinear``, ``BucketedProjection``).
  oneDNN builds and keeps a kernel for every shape of a bf16 product, and token batching (training) or rows
  finishing (greedy search) give nearly every product a new row count. Padding the rows with zeros to one of 16
  sizes per octave leaves a few shapes: a bf16 run's memory stops growing, and greedy bf16 decoding runs faster.
  The training loss does its own vocabulary product with these helpers (``nmt.training.criterion``).
- **Weights packed in oneDNN's layout for inference** (``linear.py``: ``pack_weight``, ``PackedProjection``):
  a decoding step's products of a few rows then stream the weights instead of reordering the plain matrix on
  every call, about twice as fast.
- **bf16 weights cast once, attention in fp32 while decoding** (:func:`for_inference`): autocast would re-cast
  every weight at every step; a bf16 step's attention products, whose shape is new at nearly every step, run on
  MKL's fp32 kernels, which build nothing per shape.
- **A cheaper dropout mask** (``dropout.py``: ``LaneDropout``): one 64-bit draw decides four elements where
  torch's CPU dropout draws one Bernoulli sample per element, a third of the cost; the draws come from the
  default generator, so seeding and exact resume hold.
- **Freed memory kept, and oneDNN's built kernels** (``memory.py``): glibc would return every large freed block to
  the kernel and fault it back in, zero-filled, at the next step or update; oneDNN's kernel cache is raised from
  1,024 to 8,192, since a search meets more shapes and rebuilding an evicted kernel costs time and memory.
- **More compiled variants kept** (:func:`allow_recompiles`, --compile): each kind of decoding step is a variant
  of the one compiled function; past dynamo's default of 8 a new kind would run eagerly for good.

Off (none of these calls) is the plain model with torch's own kernels and dropout, glibc's and oneDNN's defaults:
slower on the CPU, not different in meaning. In fp32 the swapped model's outputs are the plain model's bit for
bit (``tests/test_cpu_speed_seam.py``); bf16 products on padded rows agree to bf16's rounding; packed fp32 weights
run oneDNN's kernels instead of MKL's, equal to the last bits (about 3e-6, the same hypotheses in the tests); the
lane mask is another random stream of the same distribution as torch's dropout.

Left where their arithmetic is: the attention's lengths padded to multiples of 4 in CPU bf16 training
(``nmt.models.attention.explicit_attention``) and the scaled dot-product plugin's choice between the fused and
the explicit product.
"""

from nmt.cpu_speed.apply import allow_recompiles, for_inference, process_settings, swap_layers
from nmt.cpu_speed.memory import release_freed_memory

__all__ = ["allow_recompiles", "for_inference", "process_settings", "release_freed_memory", "swap_layers"]
