"""Checkpoints: what a file holds and how it is read safely (``format``), which files a run writes,
keeps and resumes from (``manager``), and the pieces they share.

- ``format``: build the state, save it atomically, load it (safely, migrated to the current format),
  read the model for inference. No file-naming policy.
- ``manager``: names, pruning, the best metric, save and resume (``--reset-*``) for the training loop.
- ``safe_read``: ``torch.load(weights_only=True)`` with every failure as one line; damaged files name
  the newest good checkpoint beside them.
- ``versions``: the format version and the migrations from older ones.
- ``verify``: plugins, dictionaries and parameter shapes a checkpoint needs.
- ``model_fit``: a model built from a stored config only after the config is checked against the tensors.
- ``save_dir``: the ``--save-dir`` folder, created and locked for one run at a time.
- ``rng_state``: every random generator's state as plain values.
"""
