"""PyTorch shared-memory Hogwild (processes on one host): the peer of Hogwild and AGN.

What a user would write instead of Hogwild/Hogwild.py, after pytorch/examples' mnist_hogwild: the
model's tensors live in shared memory (model.share_memory()), and each of M processes loops on
its own, computing the gradient of its minibatch and stepping θ in place, without a lock:

    θ ← θ − η·g        (in shared memory, once per process step; global_step += 1)

--train_steps is the global step at which every process stops, the steps of all processes
together, as in Hogwild.py and AGN.py. The same problem as the examples (tools/peers/common.py):
digits, the seeded split, worker i's shard images[i::M], the 64→128→10 ReLU MLP from the
examples' θ₀, plain SGD at η = 0.1 and batch 32 per process. Torch is not a dependency of the
project: install it into a venv of its own (see torch_ddp.py), then
    /tmp/torchvenv/bin/python tools/peers/torch_hogwild.py [--train_steps 1000] [--workers 2]
Each process prints the examples' RESULT line.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from torch_ddp import model, test_accuracy  # noqa: E402

ALGORITHM = "torch-hogwild"


def worker_main(rank, args, net, global_step, lock):
    import torch
    torch.set_num_threads(1)  # as mnist_hogwild: the cores divided among the processes
    (train_x, train_y), (test_x, test_y) = common.load_digits(args.seed)
    shard_x, shard_y = common.shard(train_x, train_y, rank, args.workers)
    shard_x, shard_y = torch.from_numpy(shard_x), torch.from_numpy(shard_y)
    test_x, test_y = torch.from_numpy(test_x), torch.from_numpy(test_y)
    optimizer = torch.optim.SGD(net.parameters(), lr=args.learning_rate)  # steps shared θ
    batches = common.batch_indices(len(shard_x), args.batch_size, args.seed + rank)
    who, curve, local_steps = "worker%d" % rank, [], 0
    started = time.time()
    while global_step.value < args.train_steps:
        rows = torch.from_numpy(next(batches))
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(shard_x[rows]), shard_y[rows])
        loss.backward()
        optimizer.step()  # in place on the shared tensors, no lock
        with global_step.get_lock():  # the counter only, as Hogwild.py's global_step += 1
            global_step.value += 1
            step = global_step.value
        local_steps += 1
        if local_steps % args.log_every == 0:
            accuracy = test_accuracy(torch, net, test_x, test_y)
            curve.append([round(time.time(), 3), step, round(accuracy, 4)])
            common.say("[%s] step %d (global %d) loss %.4f test accuracy %.4f"
                       % (who, local_steps, step, loss.item(), accuracy), lock)
    common.report(ALGORITHM, who, args.workers, global_step.value, local_steps,
                  test_accuracy(torch, net, test_x, test_y), curve, started, lock=lock,
                  task_index=rank, torch=torch.__version__)


def main(argv=None):
    args = common.parser(__doc__, train_steps=1000, learning_rate=0.1).parse_args(argv)
    import torch
    import torch.multiprocessing as mp
    (train_x, _), _ = common.load_digits(args.seed)
    net = model(torch, args.seed, train_x.shape[1])
    net.share_memory()
    context = mp.get_context("fork")
    global_step = context.Value("l", 0)
    lock = context.Lock()  # the processes share one stdout: whole lines only
    processes = [context.Process(target=worker_main, args=(rank, args, net, global_step, lock))
                 for rank in range(args.workers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
    return max(abs(process.exitcode) for process in processes)


if __name__ == "__main__":
    sys.exit(main())
