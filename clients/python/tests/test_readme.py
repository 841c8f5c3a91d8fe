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


def test_the_readme_has_a_sync_an_async_and_an_events_example() -> None:
    assert len(BLOCKS) == 3 and "AsyncClient" in BLOCKS[1] and ".events(" in BLOCKS[2]


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(service: Service, index: int) -> None:
    env = {**os.environ, "TURNSTILE_URL": service.base_url, "TURNSTILE_KEY": service.demo_key}
    done = subprocess.run([sys.executable, "-c", BLOCKS[index]], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    if ".events(" in BLOCKS[index]:
        lines = done.stdout.strip().splitlines()
        assert len(lines) == 3 and all(re.fullmatch(r"llm-subagent: \d+ active, \d+ queued, \d+ admitted", line) for line in lines), done.stdout
    else:
        assert done.stdout.strip() == "released: True answer: ...", done.stdout + done.stderr
