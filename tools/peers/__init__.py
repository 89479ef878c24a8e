"""The programs a user would pick instead of our examples, on the same problem, for
`python tools/benchmark.py --peers`: one standalone script per peer, each printing the examples'
RESULT line.

    tf2_ps.py         TensorFlow 2's ParameterServerStrategy (1 ps, M workers, a coordinator);
                      the peer of Hogwild and AGN; run with .venv-tf2/bin/python
    torch_ddp.py      PyTorch DistributedDataParallel, gloo, M ranks; the peer of Synchronous-SGD
    torch_hogwild.py  PyTorch shared-memory Hogwild, M processes; the peer of Hogwild and AGN

common.py holds what they share with the examples (data, split, shards, model, θ₀, RESULT).
Torch is not a dependency of the project: the torch peers run from a venv of its own.
"""
