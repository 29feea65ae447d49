from __future__ import annotations

from pathlib import Path

import pytest
from shared_data import CORPUS, need


@pytest.fixture
def corpus() -> Path:
    return need(CORPUS)
