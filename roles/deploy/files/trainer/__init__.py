"""Reference GPT pretraining code: prepare data, train (single process or DDP), generate.

Entry points, run with this directory's parent on PYTHONPATH:

    python -m trainer.prepare  --input PATH ... --out DATA
    python -m trainer.train    --data DATA --out RUN --steps N
    python -m trainer.generate --checkpoint RUN --prompt TEXT
"""
