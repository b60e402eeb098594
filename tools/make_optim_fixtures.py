#!/usr/bin/python3
"""make_optim_fixtures.py - writes tests/fixtures/optim/*.bin: torch.optim
trajectories and torch.optim.lr_scheduler learning rates.

Optimizer cases ("optim-*.bin"): one parameter vector of N_PARAMS float32
values runs STEPS steps of a torch.optim optimizer (1.13, CPU, foreach off),
each with its own gradient vector; after every step the file holds the
parameters and the optimizer's state buffers. tests/test_optim.c replays the
gradients through dp_optimizer and compares. A few elements get gradients
around 1e-8, where Adam's and Adagrad's eps matters, so the place eps is
added is tested too.

torch gets the hyperparameters as written here (Python floats); the config
tensor holds them as float32, as dptrain's configuration does (dptrain's
Adam recovers the written decimal from the float for its double
arithmetic, see src/optim/optim.c). "optim-momentum", "optim-adagrad",
"optim-adam-defaults" and "optim-adamw" hold zeros in the config (dptrain's
defaults) and run torch's own defaults; AdamW's default weight decay (0.01,
which dptrain's library does not put in for a 0: 0 is no decay there) is
written into the config as torch used it.

Schedule cases ("schedule-*.bin"): the learning rate torch's schedulers give
for each of STEPS_SCHED iterations (scheduler.step() once per iteration),
the schedules of include/dptrain/schedule.h: StepLR, CosineAnnealingLR, and
the warm-up LinearLR(1/W, total_iters=W-1) chained with them
(ChainedScheduler). The script also checks torch's values against
schedule.h's closed form in float64 before writing them.

Warm-up cases ("schedule-*-start", "-sequential", "exponential"): the same,
for torchvision's --lr-warmup-method, --lr-warmup-decay and SequentialLR,
and ExponentialLR; kept in float64 (their bits), so that the test holds to
1e-12. Where the case says "per epoch", torch's schedulers step once per
epoch as torchvision's reference steps them, and each epoch's lr is written
for its N iterations (what schedule.h gives at every step); else they step
per iteration. Tensors:
    "config_f64_bits" i32[10]  lr, gamma, min_lr, warmup_epochs, warmup_start
    "config_int"      i32[7]   kind (3 exponential), step_epochs, total_epochs,
                               steps_per_epoch, warmup_steps, warmup_method
                               (0 linear, 1 constant), sequential (0/1)
    "lr_f64_bits"     i32[2 S] the learning rate of iteration t

Clipping cases ("clip-*.bin"): torch.nn.utils.clip_grad_norm_ over four
tensors of several sizes, then an SGD step with momentum 0.9, for STEPS
steps (tests/test_clip.c replays them through optim.h's dp_clip_* and
dp_optimizer):
    "config"     f32[8]  the optimizer case's 7 values, then max_norm
    "params0"    f32[N]  initial parameters (the tensors one after the other)
    "grads"      f32[S, N]  the gradients of step s before clipping
    "total_norm" f32[S]  what clip_grad_norm_ returned
    "clipped"    f32[S, N]  the gradients after it
    "params"     f32[S, N]  the parameters after step s

Moving-average cases ("ema-*.bin"): torchvision's ExponentialMovingAverage
(an AveragedModel of a weight and a buffer) over STEPS model states, its
decay from train.py's adjustment (tests/test_ema.c replays them through
optim.h's dp_ema_decay and dp_ema_update):
    "config"          f32[6]  base decay, steps, global batch, epochs, warm-up updates, decay
    "config_f64_bits" i32[12] the same six as float64 (their bits)
    "states"          f32[S, N]  the model after step s
    "averages"        f32[S, N]  the average after its update at step s

Run:  /usr/bin/python3 tools/make_optim_fixtures.py [output_dir]
(default tests/fixtures/optim). Re-running reproduces the same bytes.

The files use the DPFX format of tools/make_fixtures.py (tests/fixture.h):
op name = the optimizer kind ("sgd", "momentum", "adagrad", "adam", "adamw") or
"schedule", attributes unused, and these tensors:
  optimizer cases:
    "config"    f32[7]  lr, weight_decay, momentum, nesterov (0/1), beta1,
                        beta2, eps (0 = dptrain's default)
    "params0"   f32[N]  initial parameters
    "grads"     f32[S, N]  the gradient of step s
    "params"    f32[S, N]  the parameters after step s
    state names ("momentum_buffer", "sum", "exp_avg", "exp_avg_sq")
                f32[S, N]  the state buffer after step s
  schedule cases:
    "config"     f32[4]  lr, gamma, min_lr, warmup_epochs
    "config_int" i32[5]  kind (0 constant, 1 step, 2 cosine), step_epochs,
                         total_epochs, steps_per_epoch, warmup_steps
    "lr"         f32[S]  the learning rate of iteration t (before step t)
"""
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import default_attr, rng_for, write_case  # noqa: E402

N_PARAMS = 37  # not a multiple of the SIMD width: ATen's vector and scalar paths both run
STEPS = 6
STEPS_SCHED = 60


def optim_case(name, kind, lr, weight_decay=0.0, momentum=0.0, nesterov=False, betas=None, eps=None,
               torch_defaults=False):
    """torch_defaults: torch runs its own defaults for momentum (0.9, SGD has
    none: given), eps and betas; the config holds 0 for them, dptrain's
    defaults."""
    rng = rng_for(name)
    params0 = rng.standard_normal(N_PARAMS).astype(np.float32)
    grads = rng.standard_normal((STEPS, N_PARAMS)).astype(np.float32)
    grads[:, :3] *= np.float32(1e-8)  # where eps is not negligible
    grads[:, 3] = np.float32(0.0)

    param = torch.nn.Parameter(torch.from_numpy(params0.copy()))
    if kind == "sgd":
        opt = torch.optim.SGD([param], lr=lr, weight_decay=weight_decay)
        config = [lr, weight_decay, 0, 0, 0, 0, 0]
    elif kind == "momentum":
        opt = torch.optim.SGD([param], lr=lr, weight_decay=weight_decay, momentum=momentum or 0.9,
                              nesterov=nesterov)
        config = [lr, weight_decay, 0 if torch_defaults else momentum, int(nesterov), 0, 0, 0]
    elif kind == "adagrad":
        if torch_defaults:
            opt = torch.optim.Adagrad([param], lr=lr, weight_decay=weight_decay)
            config = [lr, weight_decay, 0, 0, 0, 0, 0]
        else:
            opt = torch.optim.Adagrad([param], lr=lr, weight_decay=weight_decay, eps=eps)
            config = [lr, weight_decay, 0, 0, 0, 0, eps]
    elif kind == "adam":
        if torch_defaults:
            opt = torch.optim.Adam([param], lr=lr, weight_decay=weight_decay)
            config = [lr, weight_decay, 0, 0, 0, 0, 0]
        else:
            betas = betas or (0.9, 0.999)
            eps = eps if eps is not None else 1e-8
            opt = torch.optim.Adam([param], lr=lr, weight_decay=weight_decay, betas=betas, eps=eps)
            config = [lr, weight_decay, 0, 0, betas[0], betas[1], eps]
    elif kind == "adamw":
        if torch_defaults:  # every default of torch's, its weight decay too (0.01, into the config)
            opt = torch.optim.AdamW([param], lr=lr)
            config = [lr, opt.defaults["weight_decay"], 0, 0, 0, 0, 0]
            assert config[1] == 0.01, config
        else:
            betas = betas or (0.9, 0.999)
            eps = eps if eps is not None else 1e-8
            opt = torch.optim.AdamW([param], lr=lr, weight_decay=weight_decay, betas=betas, eps=eps)
            config = [lr, weight_decay, 0, 0, betas[0], betas[1], eps]
        assert not opt.defaults["amsgrad"] and not opt.defaults["maximize"]
    else:
        raise ValueError(kind)
    state_names = {"sgd": [], "momentum": ["momentum_buffer"], "adagrad": ["sum"],
                   "adam": ["exp_avg", "exp_avg_sq"], "adamw": ["exp_avg", "exp_avg_sq"]}[kind]

    params_after = np.zeros((STEPS, N_PARAMS), np.float32)
    states_after = {s: np.zeros((STEPS, N_PARAMS), np.float32) for s in state_names}
    for step in range(STEPS):
        param.grad = torch.from_numpy(grads[step].copy())
        opt.step()
        params_after[step] = param.detach().numpy()
        for s in state_names:
            states_after[s][step] = opt.state[param][s].numpy()
    tensors = [("config", np.array(config, np.float32)), ("params0", params0), ("grads", grads),
               ("params", params_after)]
    tensors += [(s, states_after[s]) for s in state_names]
    return name, kind, tensors


def all_optim_cases():
    return [
        optim_case("optim-sgd", "sgd", lr=0.1),
        optim_case("optim-sgd-wd", "sgd", lr=0.05, weight_decay=0.01),
        optim_case("optim-sgd-lr2", "sgd", lr=2.0),
        optim_case("optim-momentum", "momentum", lr=0.05, torch_defaults=True),
        optim_case("optim-momentum-wd", "momentum", lr=0.02, momentum=0.8, weight_decay=0.05),
        optim_case("optim-nesterov", "momentum", lr=0.03, momentum=0.9, nesterov=True),
        optim_case("optim-nesterov-wd", "momentum", lr=0.03, momentum=0.7, nesterov=True, weight_decay=0.1),
        optim_case("optim-adagrad", "adagrad", lr=0.1, torch_defaults=True),
        optim_case("optim-adagrad-wd", "adagrad", lr=0.3, weight_decay=0.02, eps=1e-10),
        optim_case("optim-adagrad-eps", "adagrad", lr=0.1, eps=1e-3),
        optim_case("optim-adam", "adam", lr=0.001),
        optim_case("optim-adam-wd", "adam", lr=0.01, weight_decay=0.1),
        optim_case("optim-adam-betas", "adam", lr=0.05, betas=(0.5, 0.75), eps=1e-3),
        optim_case("optim-adam-defaults", "adam", lr=0.002, torch_defaults=True),
        optim_case("optim-adamw", "adamw", lr=0.001, torch_defaults=True),
        optim_case("optim-adamw-wd", "adamw", lr=0.01, weight_decay=0.3),
        optim_case("optim-adamw-betas", "adamw", lr=0.05, weight_decay=0.05, betas=(0.5, 0.75), eps=1e-3),
        optim_case("optim-adamw-wd0", "adamw", lr=0.002, weight_decay=0.0),
    ]


def clip_case(name, max_norm, lr, sizes, scales):
    """torch.nn.utils.clip_grad_norm_(params, max_norm) (1.13: the float32
    norm of the per-tensor norms, max_norm / (norm + 1e-6) clamped to 1,
    each gradient multiplied by it), then an SGD step with momentum 0.9,
    over STEPS steps; step s's gradients are standard normal times
    scales[s] (some steps clipped, some not)."""
    rng = rng_for(name)
    n = sum(sizes)
    params0 = rng.standard_normal(n).astype(np.float32)
    grads = np.zeros((STEPS, n), np.float32)
    for step in range(STEPS):
        grads[step] = (rng.standard_normal(n) * scales[step]).astype(np.float32)
    params = [torch.nn.Parameter(torch.from_numpy(part.copy())) for part in np.split(params0, np.cumsum(sizes)[:-1])]
    opt = torch.optim.SGD(params, lr=lr, momentum=0.9)
    norms = np.zeros(STEPS, np.float32)
    clipped = np.zeros((STEPS, n), np.float32)
    params_after = np.zeros((STEPS, n), np.float32)
    for step in range(STEPS):
        for p, g in zip(params, np.split(grads[step], np.cumsum(sizes)[:-1])):
            p.grad = torch.from_numpy(g.copy())
        norms[step] = torch.nn.utils.clip_grad_norm_(params, max_norm).item()
        clipped[step] = np.concatenate([p.grad.numpy() for p in params])
        opt.step()
        params_after[step] = np.concatenate([p.detach().numpy() for p in params])
    tensors = [("config", np.array([lr, 0, 0.9, 0, 0, 0, 0, max_norm], np.float32)), ("params0", params0),
               ("grads", grads), ("total_norm", norms), ("clipped", clipped), ("params", params_after)]
    return name, "clip", tensors


def all_clip_cases():
    sizes = [37, 5, 100, 1000]  # tensors of several sizes: torch's per-tensor norms, then theirs
    return [
        clip_case("clip-mixed", 1.0, 0.05, sizes, [0.01, 0.1, 1.0, 0.02, 3.0, 0.05]),
        clip_case("clip-always", 0.7, 0.1, sizes, [1.0, 2.0, 0.5, 4.0, 1.5, 0.3]),
        clip_case("clip-never", 1000.0, 0.05, sizes, [1.0, 2.0, 0.5, 4.0, 1.5, 0.3]),
    ]


def ema_case(name, base_decay, steps, global_batch, epochs, warmup_updates=0):
    """torchvision's ExponentialMovingAverage (0.14's references/classification/utils.py: an
    AveragedModel with use_buffers=True and avg_fn decay * avg + (1 - decay) * param) of a module
    with a weight and a buffer, its decay from train.py's adjustment of --model-ema-decay, updated
    after each of STEPS model states; during the first warmup_updates the count is reset after the
    update (train.py's `n_averaged.fill_(0)` in the warm-up epochs), so the next copies again."""
    rng = rng_for(name)
    adjust = global_batch * steps / epochs  # train.py: world_size * batch_size * model_ema_steps / epochs
    alpha = min(1.0, (1.0 - base_decay) * adjust)
    decay = 1.0 - alpha

    def ema_avg(avg_model_param, model_param, num_averaged):
        return decay * avg_model_param + (1 - decay) * model_param

    module = torch.nn.Linear(N_PARAMS, 1, bias=False)
    module.register_buffer("stat", torch.zeros(5))
    ema = torch.optim.swa_utils.AveragedModel(module, avg_fn=ema_avg, use_buffers=True)
    n = N_PARAMS + 5
    states = np.zeros((STEPS, n), np.float32)
    averages = np.zeros((STEPS, n), np.float32)
    for step in range(STEPS):
        states[step] = (rng.standard_normal(n) * (1 + step)).astype(np.float32)
        with torch.no_grad():
            module.weight.copy_(torch.from_numpy(states[step][:N_PARAMS].reshape(1, N_PARAMS)))
            module.stat.copy_(torch.from_numpy(states[step][N_PARAMS:]))
        ema.update_parameters(module)
        if step < warmup_updates:
            ema.n_averaged.fill_(0)
        averages[step] = np.concatenate([ema.module.weight.detach().numpy().ravel(), ema.module.stat.numpy()])
    config = np.array([base_decay, steps, global_batch, epochs, warmup_updates, decay], np.float64)
    tensors = [("config", config.astype(np.float32)), ("config_f64_bits", config.view(np.int32)),
               ("states", states), ("averages", averages)]
    return name, "ema", tensors


def all_ema_cases():
    return [
        ema_case("ema-torchvision", 0.99998, 32, 1024, 600),  # the ResNet-50 v2 recipe's numbers
        ema_case("ema-short", 0.99998, 4, 50, 3),
        ema_case("ema-warmup", 0.999, 1, 256, 10, warmup_updates=2),
        ema_case("ema-alpha-one", 0.9, 10, 512, 2),  # alpha clamped to 1: the average is the model
    ]


def closed_form_lr(lr, kind, step_epochs, gamma, total_epochs, min_lr, warmup, n, t):
    """schedule.h's formula, in float64."""
    if kind == 1:
        base = lr * gamma ** (t // (step_epochs * n))
    elif kind == 2:
        base = min_lr + (lr - min_lr) * (1 + math.cos(math.pi * min(t, total_epochs * n) / (total_epochs * n))) / 2
    else:
        base = lr
    return base * ((t + 1) / warmup if t < warmup else 1.0)


def schedule_case(name, kind, lr, steps_per_epoch, step_epochs=0, gamma=0.0, total_epochs=0, min_lr=0.0,
                  warmup_epochs=0.0, warmup_steps=0):
    lr, gamma, min_lr, warmup_epochs = (float(np.float32(x)) for x in (lr, gamma, min_lr, warmup_epochs))
    warmup = warmup_steps if warmup_steps else int(round(warmup_epochs * steps_per_epoch))
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=lr)
    schedulers = []
    if warmup >= 2:
        schedulers.append(torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0 / warmup, end_factor=1.0,
                                                            total_iters=warmup - 1))
    if kind == 1:
        schedulers.append(torch.optim.lr_scheduler.StepLR(opt, step_size=step_epochs * steps_per_epoch,
                                                          gamma=gamma))
    elif kind == 2:
        assert warmup < 2 or min_lr == 0.0, "torch's chained cosine is a product only with eta_min 0"
        schedulers.append(torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total_epochs * steps_per_epoch,
                                                                     eta_min=min_lr))
    chain = torch.optim.lr_scheduler.ChainedScheduler(schedulers) if schedulers else None
    lrs = []
    for t in range(STEPS_SCHED):
        lrs.append(opt.param_groups[0]["lr"])
        expected = closed_form_lr(lr, kind, step_epochs, gamma, total_epochs, min_lr, warmup, steps_per_epoch, t)
        assert abs(lrs[-1] - expected) <= 1e-12 + 1e-9 * expected, (name, t, lrs[-1], expected)
        opt.step()
        if chain:
            chain.step()
    config = np.array([lr, gamma, min_lr, warmup_epochs], np.float32)
    config_int = np.array([kind, step_epochs, total_epochs, steps_per_epoch, warmup_steps], np.int32)
    tensors = [("config", config), ("config_int", config_int), ("lr", np.array(lrs, np.float32))]
    return name, "schedule", tensors


def warmup_closed_form(lr, kind, step_epochs, gamma, total_epochs, min_lr, warmup, start, method, sequential,
                       n, t):
    """schedule.h's formula with the warm-up's method, start and placement, in float64."""
    if t < warmup:
        if method == 1:
            factor = start if start else 1.0 / warmup
        else:
            factor = start + (1 - start) * t / warmup if start else (t + 1) / warmup
    else:
        factor = 1.0
    shift = warmup if sequential else 0
    u = t - shift if t >= shift else t
    if kind == 3:
        base = lr * gamma ** (u // n)
    elif kind == 2:
        length = total_epochs * n - shift
        base = min_lr + (lr - min_lr) * (1 + math.cos(math.pi * min(u, length) / length)) / 2
    else:
        base = closed_form_lr(lr, kind, step_epochs, gamma, total_epochs, min_lr, 0, n, u)
    if sequential and t < warmup:
        base = lr
    return base * factor


def warmup_case(name, kind, lr, steps_per_epoch, make_main, steps, step_epochs=0, gamma=0.0, total_epochs=0,
                min_lr=0.0, warmup_epochs=0, start=0.0, method=0, sequential=0, per_epoch=False):
    """make_main(opt, shift): the main scheduler (shift: the warm-up's steps or epochs when sequential);
    the warm-up as torchvision builds it, in iterations (or epochs: per_epoch). The numbers are the
    decimals given, as dptrain's CLI passes a float option's shortest decimal (dp_float_decimal)."""
    warmup = warmup_epochs * steps_per_epoch
    units = warmup_epochs if per_epoch else warmup  # the warm-up in scheduler steps
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=lr)
    if warmup == 0:
        warm = None
    elif method == 1:
        warm = torch.optim.lr_scheduler.ConstantLR(opt, factor=start if start else 1.0 / units, total_iters=units)
    elif start:
        warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=start, total_iters=units)
    else:
        warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0 / units, total_iters=units - 1)
    main = make_main(opt, units if sequential else 0)
    if not warm:
        schedule = main
    elif sequential:
        schedule = torch.optim.lr_scheduler.SequentialLR(opt, [warm, main], milestones=[units])
    else:
        schedule = torch.optim.lr_scheduler.ChainedScheduler([warm, main])
    lrs = []
    for t in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        expected = warmup_closed_form(lr, kind, step_epochs, gamma, total_epochs, min_lr, warmup, start, method,
                                      sequential, steps_per_epoch, t)
        assert abs(lrs[-1] - expected) <= 1e-13 * expected, (name, t, lrs[-1], expected)
        opt.step()
        if not per_epoch or (t + 1) % steps_per_epoch == 0:
            schedule.step()
    config = np.array([lr, gamma, min_lr, warmup_epochs, start], np.float64)
    config_int = np.array([kind, step_epochs, total_epochs, steps_per_epoch, 0, method, sequential], np.int32)
    tensors = [("config_f64_bits", config.view(np.int32)), ("config_int", config_int),
               ("lr_f64_bits", np.array(lrs, np.float64).view(np.int32))]
    return name, "schedule", tensors


def all_warmup_cases():
    sched = torch.optim.lr_scheduler
    return [
        # ExponentialLR as torchvision steps it, per epoch, no warm-up
        warmup_case("schedule-exponential", 3, lr=0.1, steps_per_epoch=6, steps=60, gamma=0.8, per_epoch=True,
                    make_main=lambda o, s: sched.ExponentialLR(o, gamma=0.8)),
        # chained: LinearLR(start_factor F, total_iters W) x StepLR, per iteration
        warmup_case("schedule-step-linear-start", 1, lr=0.5, steps_per_epoch=5, steps=60, step_epochs=2, gamma=0.5,
                    warmup_epochs=2, start=0.25,
                    make_main=lambda o, s: sched.StepLR(o, step_size=10, gamma=0.5)),
        # chained: ConstantLR(F, W) x CosineAnnealingLR
        warmup_case("schedule-cosine-constant-start", 2, lr=0.3, steps_per_epoch=7, steps=56, total_epochs=8,
                    warmup_epochs=1, start=0.1, method=1,
                    make_main=lambda o, s: sched.CosineAnnealingLR(o, T_max=56)),
        # torchvision's recipe: SequentialLR([LinearLR(0.01, W), CosineAnnealingLR(T - W, eta_min)], [W])
        warmup_case("schedule-cosine-sequential", 2, lr=0.5, steps_per_epoch=5, steps=50, total_epochs=10,
                    min_lr=0.001, warmup_epochs=2, start=0.01, sequential=1,
                    make_main=lambda o, s: sched.CosineAnnealingLR(o, T_max=50 - s, eta_min=0.001)),
        # the default start (t + 1) / W, sequential
        warmup_case("schedule-cosine-sequential-default", 2, lr=0.2, steps_per_epoch=4, steps=40, total_epochs=10,
                    warmup_epochs=3, sequential=1, make_main=lambda o, s: sched.CosineAnnealingLR(o, T_max=40 - s)),
        # torchvision per epoch: SequentialLR([ConstantLR(F, E), ExponentialLR(gamma)], [E])
        warmup_case("schedule-exponential-sequential", 3, lr=0.4, steps_per_epoch=4, steps=48, gamma=0.7,
                    warmup_epochs=2, start=0.1, method=1, sequential=1, per_epoch=True,
                    make_main=lambda o, s: sched.ExponentialLR(o, gamma=0.7)),
        # torchvision per epoch: SequentialLR([ConstantLR(F, E), StepLR(2, 0.1)], [E])
        warmup_case("schedule-step-sequential", 1, lr=0.1, steps_per_epoch=3, steps=36, step_epochs=2, gamma=0.1,
                    warmup_epochs=3, start=0.5, method=1, sequential=1, per_epoch=True,
                    make_main=lambda o, s: sched.StepLR(o, step_size=2, gamma=0.1)),
    ]


def all_schedule_cases():
    return [
        schedule_case("schedule-constant", 0, lr=0.2, steps_per_epoch=7),
        schedule_case("schedule-constant-warmup", 0, lr=0.4, steps_per_epoch=7, warmup_steps=10),
        schedule_case("schedule-step", 1, lr=0.5, steps_per_epoch=4, step_epochs=3, gamma=0.5),
        schedule_case("schedule-step-warmup", 1, lr=0.1, steps_per_epoch=5, step_epochs=2, gamma=0.1,
                      warmup_epochs=1.4),
        schedule_case("schedule-cosine", 2, lr=0.3, steps_per_epoch=6, total_epochs=10),
        schedule_case("schedule-cosine-min", 2, lr=0.3, steps_per_epoch=5, total_epochs=12, min_lr=0.01),
        schedule_case("schedule-cosine-warmup", 2, lr=1.0, steps_per_epoch=8, total_epochs=8, warmup_epochs=2.0),
    ]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "tests", "fixtures", "optim")
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(1)
    total, names = 0, set()
    for name, op, tensors in all_optim_cases() + all_schedule_cases() + all_warmup_cases() + all_clip_cases() + all_ema_cases():
        assert name not in names, f"duplicate case {name}"
        names.add(name)
        total += write_case(out_dir, name, op, default_attr(), tensors)
    print(f"wrote {len(names)} cases, {total} bytes, to {os.path.normpath(out_dir)}")


if __name__ == "__main__":
    main()
