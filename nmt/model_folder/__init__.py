"""A self-contained model folder (nmt-export): safetensors weights, the model config, the dictionaries and
the text pipeline with its BPE codes, and a model card. Nothing in it is ever unpickled."""
