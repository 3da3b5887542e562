"""examples/onnx_translate.py: an exported model translates with onnxruntime, numpy and the tokenizer/BPE packages
alone (torch made unimportable in its process), giving the Python API's translations."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "onnx_translate.py"
# The example's process: an import of torch (or of nmt, which needs it) fails, then the example runs as __main__.
WITHOUT_TORCH = """
import importlib.abc, runpy, sys
class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "nmt"):
            raise ImportError(f"{name} is not available to this example")
sys.meta_path.insert(0, NoTorch())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
SENTENCES = ["a man rides a bike .", "two dogs run in the park .", "", "the woman reads a book ."]


@pytest.fixture(scope="module")
def onnx_folder(exported_model, tmp_path_factory):
    from model_folder_setup import export

    folder = tmp_path_factory.mktemp("onnx") / "model"
    shutil.copytree(exported_model.folder, folder)
    assert export("--path", folder, "--with", "onnx") == 0  # fp32 and int8 graphs (--onnx-precision both)
    return folder


@pytest.mark.parametrize("beam", [1, 5])
def test_the_example_translates_without_torch_as_the_api_does(onnx_folder, beam):
    import nmt

    done = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, str(EXAMPLE), str(onnx_folder), "--beam", str(beam)],
                          input="\n".join(SENTENCES) + "\n", capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    expected = nmt.load(onnx_folder, engine="torch").translate(SENTENCES, beam=beam)
    assert done.stdout.splitlines() == expected


def test_the_example_runs_the_int8_graphs_without_torch(onnx_folder):
    """--int8 reads engine.json's int8 files: the same output as nmt's onnxruntime engine over those graphs."""
    import nmt

    done = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, str(EXAMPLE), str(onnx_folder), "--int8"],
                          input="\n".join(SENTENCES) + "\n", capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    expected = nmt.load(onnx_folder, engine="onnxruntime", quantize="int8", threads=1).translate(SENTENCES, beam=1)
    assert done.stdout.splitlines() == expected
