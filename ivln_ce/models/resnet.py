"""ResNet trunks defined in the project (no torchvision), with loadable parameter names.

``ResNet`` uses torchvision's names (``conv1``, ``bn1``, ``layer1.0.conv1``,
``layer1.0.downsample.0``, ...), so torchvision-layout and official RedNet / LatentCMA weights
load directly. ``DDPPOResNet`` is the GroupNorm ResNet-50 of the DD-PPO depth encoder in its
official layout (``conv1.{0,1}``, ``layer{L}.{b}.convs.{0,1,3,4,6,7}``, ``downsample.{0,1}``;
bottleneck widths 32/64/128/256, stride on the 3x3 convolution).
"""

from __future__ import annotations

import torch
from torch import nn


def conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride, 1, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


LAYOUTS = {18: (BasicBlock, [2, 2, 2, 2]), 34: (BasicBlock, [3, 4, 6, 3]), 50: (Bottleneck, [3, 4, 6, 3])}


class ResNet(nn.Module):
    """torchvision-layout ResNet trunk (no pooling head): conv1 ... layer4."""

    def __init__(self, depth: int = 50, in_channels: int = 3):
        super().__init__()
        if depth not in LAYOUTS:
            raise ValueError(f"ResNet depth must be one of {sorted(LAYOUTS)}, got {depth}")
        block, blocks = LAYOUTS[depth]
        self.inplanes = 64
        self.conv1 = nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._layer(block, 64, blocks[0])
        self.layer2 = self._layer(block, 128, blocks[1], 2)
        self.layer3 = self._layer(block, 256, blocks[2], 2)
        self.layer4 = self._layer(block, 512, blocks[3], 2)
        self.channels = [64 * block.expansion, 128 * block.expansion, 256 * block.expansion, 512 * block.expansion]

    def _layer(self, block, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion),
            )
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def stem(self, x):
        return self.maxpool(self.relu(self.bn1(self.conv1(x))))

    def forward(self, x):
        x = self.stem(x)
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))


# --------------------------------------------------------------------------- DD-PPO (GroupNorm)


class DDPPOBottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, ngroups: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.convs = nn.Sequential(
            nn.Conv2d(inplanes, planes, 1, bias=False),
            nn.GroupNorm(ngroups, planes),
            nn.ReLU(True),
            nn.Conv2d(planes, planes, 3, stride, 1, bias=False),
            nn.GroupNorm(ngroups, planes),
            nn.ReLU(True),
            nn.Conv2d(planes, planes * 4, 1, bias=False),
            nn.GroupNorm(ngroups, planes * 4),
        )
        self.downsample = downsample
        self.relu = nn.ReLU(True)

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(self.convs(x) + identity)


class DDPPOResNet(nn.Module):
    """The DD-PPO depth backbone: widths 32/64/128/256 x4, blocks [3, 4, 6, 3], GroupNorm(16)."""

    def __init__(self, in_channels: int = 1, base: int = 32, ngroups: int = 16, blocks=(3, 4, 6, 3)):
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(in_channels, base, 7, 2, 3, bias=False), nn.GroupNorm(ngroups, base), nn.ReLU(True))
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.inplanes = base
        self.ngroups = ngroups
        self.layer1 = self._layer(base, blocks[0])
        self.layer2 = self._layer(base * 2, blocks[1], 2)
        self.layer3 = self._layer(base * 4, blocks[2], 2)
        self.layer4 = self._layer(base * 8, blocks[3], 2)
        self.out_channels = base * 8 * 4

    def _layer(self, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * 4:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes * 4, 1, stride, bias=False), nn.GroupNorm(self.ngroups, planes * 4))
        layers = [DDPPOBottleneck(self.inplanes, planes, self.ngroups, stride, downsample)]
        self.inplanes = planes * 4
        layers += [DDPPOBottleneck(self.inplanes, planes, self.ngroups) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.conv1(x))
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))
