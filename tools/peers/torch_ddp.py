"""PyTorch DistributedDataParallel (gloo, ranks on localhost): the peer of Synchronous-SGD.

What a user would write instead of Synchronous-SGD/ssgd.py: every rank computes the gradient of its
own minibatch, DDP all-reduces (averages) the gradients inside backward(), and every rank applies
the same step, so θ stays identical on every rank:

    θ ← θ − η·(1/M)·Σᵢ gᵢ        (one synchronous update; --train_steps of them, as in ssgd.py)

The same problem as the examples (tools/peers/common.py): digits, the seeded split, worker i's
shard images[i::M], the 64→128→10 ReLU MLP from the examples' θ₀, plain SGD at η = 0.1 and batch
32 per rank. Torch is not a dependency of the project: install it into a venv of its own,
    python3 -m venv /tmp/torchvenv
    /tmp/torchvenv/bin/pip install torch numpy scikit-learn --index-url https://download.pytorch.org/whl/cpu
    /tmp/torchvenv/bin/python tools/peers/torch_ddp.py [--train_steps 1000] [--workers 2]
Each rank prints the examples' RESULT line.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

ALGORITHM = "torch-ddp"


def model(torch, seed, inputs):
    """The examples' MLP, starting from their θ₀ (nn.Linear keeps weights as out × in)."""
    initial = dict(common.initial_parameters(inputs, common.CLASSES, seed))
    net = torch.nn.Sequential(torch.nn.Linear(inputs, common.HIDDEN), torch.nn.ReLU(),
                              torch.nn.Linear(common.HIDDEN, common.CLASSES))
    with torch.no_grad():
        net[0].weight.copy_(torch.from_numpy(initial["hidden_weights"].T.copy()))
        net[0].bias.copy_(torch.from_numpy(initial["hidden_biases"]))
        net[2].weight.copy_(torch.from_numpy(initial["output_weights"].T.copy()))
        net[2].bias.copy_(torch.from_numpy(initial["output_biases"]))
    return net


def test_accuracy(torch, net, images, labels):
    with torch.no_grad():
        return float((net(images).argmax(1) == labels).float().mean())


def rank_main(rank, args, port, lock):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    torch.set_num_threads(1)  # one core per rank, as each example task gets on a small host
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=args.workers)
    (train_x, train_y), (test_x, test_y) = common.load_digits(args.seed)
    shard_x, shard_y = common.shard(train_x, train_y, rank, args.workers)
    shard_x, shard_y = torch.from_numpy(shard_x), torch.from_numpy(shard_y)
    test_x, test_y = torch.from_numpy(test_x), torch.from_numpy(test_y)
    net = DistributedDataParallel(model(torch, args.seed, train_x.shape[1]))
    optimizer = torch.optim.SGD(net.parameters(), lr=args.learning_rate)
    batches = common.batch_indices(len(shard_x), args.batch_size, args.seed + rank)
    who, curve = "worker%d" % rank, []
    started = time.time()
    for step in range(1, args.train_steps + 1):
        rows = torch.from_numpy(next(batches))
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(shard_x[rows]), shard_y[rows])
        loss.backward()  # the all-reduce of the gradients, overlapped with backward
        optimizer.step()
        if step % args.log_every == 0:
            accuracy = test_accuracy(torch, net.module, test_x, test_y)
            curve.append([round(time.time(), 3), step, round(accuracy, 4)])
            common.say("[%s] step %d loss %.4f test accuracy %.4f"
                       % (who, step, loss.item(), accuracy), lock)
    common.report(ALGORITHM, who, args.workers, args.train_steps, args.train_steps,
                  test_accuracy(torch, net.module, test_x, test_y), curve, started,
                  lock=lock, task_index=rank, torch=torch.__version__)
    dist.destroy_process_group()


def main(argv=None):
    args = common.parser(__doc__, train_steps=1000, learning_rate=0.1).parse_args(argv)
    import torch.multiprocessing as mp
    lock = mp.get_context("spawn").Lock()  # the ranks share one stdout: whole lines only
    mp.spawn(rank_main, args=(args, common.free_port(), lock), nprocs=args.workers, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
