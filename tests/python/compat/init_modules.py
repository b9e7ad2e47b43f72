"""nn.init on module weights. Random draws differ between libraries, so
what is compared is what nn.init promises: the exact constants
(zeros_, ones_, constant_, eye_), the bounds of the uniform ones
(xavier_uniform_, kaiming_uniform_, uniform_), and the standard deviation of
the normal ones on 65,536 draws (xavier_normal_, kaiming_normal_, normal_,
trunc_normal_), rounded to two digits so a different generator passes."""
# compat: rtol=0.05 atol=0.005
import json
import math

import torch
import torch.nn as nn

torch.manual_seed(0)
fan = 256
lin = nn.Linear(fan, fan)
out = {}
nn.init.zeros_(lin.bias)
out["zeros"] = lin.bias.abs().sum().item()
nn.init.ones_(lin.bias)
out["ones"] = lin.bias.sum().item()
nn.init.constant_(lin.bias, 0.25)
out["constant"] = lin.bias.sum().item()
eye = torch.empty(3, 4)
nn.init.eye_(eye)
out["eye"] = eye.tolist()

w = lin.weight
nn.init.uniform_(w, a=-0.5, b=0.25)
out["uniform_range"] = [round(w.min().item(), 1), round(w.max().item(), 1)]
nn.init.xavier_uniform_(w)
out["xavier_uniform_max_over_bound"] = round(w.abs().max().item() / math.sqrt(6 / (2 * fan)), 2)
nn.init.kaiming_uniform_(w, a=math.sqrt(5))
bound = math.sqrt(6 / ((1 + 5) * fan))
out["kaiming_uniform_max_over_bound"] = round(w.abs().max().item() / bound, 2)
nn.init.xavier_normal_(w, gain=2.0)
out["xavier_normal_std"] = round(w.std().item() / (2.0 * math.sqrt(2 / (2 * fan))), 2)
nn.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
out["kaiming_normal_std"] = round(w.std().item() / math.sqrt(2 / fan), 2)
nn.init.normal_(w, mean=1.0, std=0.5)
out["normal_mean_std"] = [round(w.mean().item(), 2), round(w.std().item(), 2)]
nn.init.trunc_normal_(w, std=1.0, a=-2.0, b=2.0)
out["trunc_normal_absmax_le_2"] = bool(w.abs().max().item() <= 2.0)
out["gain_relu"] = nn.init.calculate_gain("relu")
out["gain_tanh"] = nn.init.calculate_gain("tanh")
out["gain_leaky"] = nn.init.calculate_gain("leaky_relu", 0.2)
out["requires_grad_kept"] = w.requires_grad and w.is_leaf
print(json.dumps(out))
