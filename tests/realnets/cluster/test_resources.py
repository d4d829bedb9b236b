"""realnets.cluster.resources: --resources-per-block read and checked, Ray's task options, and how
many blocks a cluster holds at once."""

from __future__ import annotations

import pytest

from realnets.cluster.resources import (DEFAULT_RESOURCES, MAX_RETRIES, blocks_at_once,
                                        parse_resources, task_options)


def test_parse_reads_amounts_and_defaults_to_one_cpu():
    assert parse_resources(None) == DEFAULT_RESOURCES == {"CPU": 1.0}
    assert parse_resources('{"CPU": 1, "GPU": 0.25, "TPU": 0}') == {"CPU": 1.0, "GPU": 0.25,
                                                                     "TPU": 0.0}
    assert parse_resources('{"GPU": 2}') == {"GPU": 2.0}


@pytest.mark.parametrize("text, message", [
    ("CPU=1", "must be a JSON object"), ("[1]", "must be a JSON object"),
    ("{}", "must be a JSON object"), ('{"CPU": -1}', "CPU must be a non-negative number"),
    ('{"CPU": "1"}', "CPU must be a non-negative number"),
    ('{"CPU": true}', "CPU must be a non-negative number"),
    ('{"CPU": NaN}', "CPU must be a non-negative number"),
    ('{"GPU": 1.5}', "GPU above 1 must be a whole number"),
    ('{"CPU": 0}', "must ask for something"),
])
def test_parse_refuses_with_one_line_naming_the_flag(text, message):
    with pytest.raises(ValueError, match=message) as err:
        parse_resources(text)
    assert str(err.value).startswith("resources-per-block") and "\n" not in str(err.value)


def test_task_options_split_cpu_gpu_memory_and_custom():
    options = task_options({"CPU": 2.0, "GPU": 0.25, "memory": 1e9, "slot": 1.0})
    assert options["num_cpus"] == 2.0 and options["num_gpus"] == 0.25
    assert options["memory"] == 1e9 and options["resources"] == {"slot": 1.0}
    assert options["max_retries"] == MAX_RETRIES >= 1
    assert options["runtime_env"] == {"env_vars": {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}}
    assert "resources" not in task_options({"CPU": 1.0})      # Ray refuses CPU/GPU in there


def test_blocks_at_once_is_the_scarcest_resource():
    cluster = {"CPU": 16.0, "GPU": 2.0, "memory": 6.4e10}
    assert blocks_at_once(cluster, {"CPU": 1.0, "GPU": 0.25}) == 8      # GPUs bind: 2 / 0.25
    assert blocks_at_once(cluster, {"CPU": 4.0}) == 4
    assert blocks_at_once({"CPU": 0.3}, {"CPU": 0.1}) == 3              # no float floor slip
    assert blocks_at_once(cluster, {"CPU": 1.0, "GPU": 0.0}) == 16


def test_a_block_larger_than_the_cluster_is_refused():
    with pytest.raises(ValueError, match="GPU 1 per block but the cluster has 0 in all"):
        blocks_at_once({"CPU": 16.0}, {"CPU": 1.0, "GPU": 1.0})
