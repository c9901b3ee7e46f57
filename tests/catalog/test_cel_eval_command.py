"""`manage.py cel_eval`: one selector, one ResourceSlice device, JSON out."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

DEVICE = {"name": "gpu-0", "attributes": {"type": {"string": "gpu"}, "productName": {"string": "NVIDIA L40S"},
                                           "driverVersion": {"version": "570.124.6"}},
          "capacity": {"memory": {"value": "48Gi"}}}


def _run(tmp_path, capsys, expression: str, device=DEVICE, driver: str = "gpu.nvidia.com") -> tuple[dict, int]:
    path = tmp_path / "device.json"
    path.write_text(json.dumps(device) if not isinstance(device, str) else device)
    code = 0
    try:
        call_command("cel_eval", "--expression", expression, "--driver", driver, "--device", str(path))
    except SystemExit as exc:
        code = exc.code
    return json.loads(capsys.readouterr().out), code


def test_true_and_false(tmp_path, capsys) -> None:
    expression = ('device.driver == "gpu.nvidia.com" && '
                  'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0')
    assert _run(tmp_path, capsys, expression) == ({"result": True}, 0)
    assert _run(tmp_path, capsys, expression, driver="other.example.com") == ({"result": False}, 0)
    newer = 'device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("580.0.0"))'
    assert _run(tmp_path, capsys, newer) == ({"result": False}, 0)


def test_missing_attribute_is_a_runtime_error_not_false(tmp_path, capsys) -> None:
    out, code = _run(tmp_path, capsys, 'device.attributes["gpu.nvidia.com"].nosuch == "x"')
    assert code == 1
    assert out["error"]["kind"] == "runtime"
    # A missing domain reads as an empty map: has() is false, no error.
    assert _run(tmp_path, capsys, 'has(device.attributes["other.example.com"].x)') == ({"result": False}, 0)


def test_compile_errors_carry_the_position(tmp_path, capsys) -> None:
    out, code = _run(tmp_path, capsys, "device.driver ==")
    assert code == 1
    assert out["error"]["kind"] == "compile"
    assert "line 1, column" in out["error"]["message"]


@pytest.mark.parametrize("content", ["[1, 2]", "{not yaml: [", "x" * (2 << 20)])
def test_unusable_device_files_are_clear_errors(tmp_path, capsys, content) -> None:
    with pytest.raises(CommandError):
        _run(tmp_path, capsys, "true", device=content)
