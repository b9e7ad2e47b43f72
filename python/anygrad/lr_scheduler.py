"""Learning-rate schedulers with PyTorch's names; they set
optimizer.param_groups[0]["lr"], which the optimizer reads at each step."""
import math


class _Scheduler:
    def __init__(self, optimizer, last_epoch=-1):
        self.optimizer = optimizer
        self.base_lr = optimizer.param_groups[0]["initial_lr"]
        self.last_epoch = last_epoch
        self.step()

    def get_last_lr(self):
        return [self.optimizer.param_groups[0]["lr"]]

    def step(self):
        self.last_epoch += 1
        self.optimizer.param_groups[0]["lr"] = self.lr_at(self.last_epoch)


class StepLR(_Scheduler):
    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, e):
        return self.base_lr * self.gamma ** (e // self.step_size)


class LambdaLR(_Scheduler):
    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        self.lr_lambda = lr_lambda
        super().__init__(optimizer, last_epoch)

    def lr_at(self, e):
        return self.base_lr * self.lr_lambda(e)


class CosineAnnealingLR(_Scheduler):
    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def lr_at(self, e):
        return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * e / self.T_max)) / 2


class LinearLR(_Scheduler):
    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5,
                 last_epoch=-1):
        self.s, self.e, self.n = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, e):
        f = self.s + (self.e - self.s) * min(e, self.n) / self.n
        return self.base_lr * f
