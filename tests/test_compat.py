"""Every private symbol apex touches exists with the pinned versions, and a
missing one fails loudly."""

import pytest

from apex import compat


@pytest.mark.parametrize("package", sorted(compat.SYMBOLS))
def test_each_private_symbol_exists_with_the_pinned_versions(package):
    compat.SYMBOLS[package]()


def test_a_missing_private_symbol_raises_naming_it_and_the_pin():
    class Client:  # a reverb.Client of another version: no _client
        pass

    with pytest.raises(compat.CompatError, match=r"reverb\.Client\._client.*dm-reverb 0\.7\.0"):
        compat.reverb_trajectory_writer(Client(), 4, 1000)


def test_node_constructor_reads_launchpads_private_field():
    import launchpad as lp

    class Thing:
        def run(self):
            pass

    assert compat.node_constructor(lp.CourierNode(Thing)) is Thing
    with pytest.raises(compat.CompatError, match="_constructor"):
        compat.node_constructor(object())


def test_the_output_to_files_dir_reaches_launchpads_module(tmp_path, monkeypatch):
    from launchpad.launch.run_locally import launch_local_output_to_files as files

    monkeypatch.setattr(files, "_LOGGING_DIR", files._LOGGING_DIR)
    monkeypatch.delenv("LAUNCHPAD_LOGGING_DIR", raising=False)
    compat.set_output_to_files_dir(str(tmp_path / "logs"))
    assert files._LOGGING_DIR == str(tmp_path / "logs")
    assert (tmp_path / "logs").is_dir()
