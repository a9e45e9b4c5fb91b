"""rotary.experiments: reproducible experiments built on rotary (PyTorch, CPU).

    python -m rotary.experiments length-generalization [--quick] [--seed S] [--seeds N] [--out DIR]
    python -m rotary.experiments plot results.json [--out DIR]
"""
