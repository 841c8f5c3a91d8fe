"""The README's examples run verbatim against the service (with the demo principal key)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Service

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_the_readme_has_a_sync_and_an_async_example() -> None:
    assert len(BLOCKS) == 2 and "AsyncClient" in BLOCKS[1]


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(service: Service, index: int) -> None:
    env = {**os.environ, "TURNSTILE_URL": service.base_url, "TURNSTILE_KEY": service.demo_key}
    done = subprocess.run([sys.executable, "-c", BLOCKS[index]], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "released: True answer: ...", done.stdout + done.stderr
