"""Shared test fixtures."""

import pytest
import torch


@pytest.fixture(autouse=True)
def restore_torch_threads():
    """Tests that run training in-process may set torch's thread count; put it back after each."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def isolate_plugin_registries():
    """Plugins a test imports in this process (--user-dir folders) are forgotten after it, so two
    tests may each bring their own plugin of the same name. The built-ins are loaded first, so
    they are part of what is restored."""
    from nmt import plugin_loader, registry

    plugin_loader.load_plugins()
    tables = [r for r in vars(registry).values() if isinstance(r, registry.Registry)]
    saved = [dict(r._entries) for r in tables]
    user_dirs = dict(plugin_loader._loaded_user_dirs)
    yield
    for table, entries in zip(tables, saved):
        table._entries.clear()
        table._entries.update(entries)
    plugin_loader._loaded_user_dirs.clear()
    plugin_loader._loaded_user_dirs.update(user_dirs)


@pytest.fixture(scope="session")
def exported_model(tmp_path_factory):
    """A tiny trained model, its checkpoints and the model folders nmt-export made of them
    (tests/model_folder_setup.py); tests that damage a folder copy it first."""
    from model_folder_setup import make_exported_model

    before = torch.get_num_threads()
    try:
        return make_exported_model(tmp_path_factory.mktemp("exported_model"))
    finally:
        torch.set_num_threads(before)  # nmt-train --num-threads 1 ran in this process


@pytest.fixture(scope="session")
def peer_export(tmp_path_factory):
    """(data-bin, checkpoint, model folder) of fairseq's Multi30k model imported and exported, made once for the
    tests that serve or translate with it (tests/served_model.py); they only read it."""
    from served_model import export_peer_model

    return export_peer_model(tmp_path_factory.mktemp("peer_export"))

