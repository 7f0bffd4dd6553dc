"""RedNet RGB-D semantic segmentation (SPEC §7), 13 classes, in the official parameter layout.

Two ResNet branches (RGB: ``conv1``/``bn1``/``layer1-4``; depth: ``conv1_d``/``bn1_d``/
``layer1_d-4_d``) fused by element-wise sums after the stem and after every stage; 1x1 skip
reducers ``agant0-4``; a decoder of transposed residual blocks ``deconv1-4`` and ``final_conv``;
``final_deconv_custom`` (2x2 stride-2 transposed conv) to full resolution; four deep-supervision
heads ``out2-5_conv_custom`` used only in training. ``depth`` picks the encoder: 50 as
officially, 18/34 for CPU training (channel counts follow the trunk).

``RedNetSegmenter`` wraps it as the mapping pipeline's predicted-semantics source with the
official input handling: RGB uint8 / 255, resized bilinearly to the depth size, ImageNet
mean/std; depth (normalised, no-hit 0) standardised with (d - 0.213) / 0.285; argmax -> class id.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ivln_ce.models.resnet import LAYOUTS, ResNet

NUM_CLASSES = 13
RGB_MEAN = (0.485, 0.456, 0.406)
RGB_STD = (0.229, 0.224, 0.225)
DEPTH_MEAN, DEPTH_STD = 0.213, 0.285


class TransBasicBlock(nn.Module):
    def __init__(self, inplanes: int, planes: int, stride: int = 1, upsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, inplanes, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(inplanes)
        self.relu = nn.ReLU(inplace=True)
        if upsample is not None and stride != 1:
            self.conv2 = nn.ConvTranspose2d(inplanes, planes, 3, stride, 1, output_padding=1, bias=False)
        else:
            self.conv2 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.upsample = upsample

    def forward(self, x):
        residual = x if self.upsample is None else self.upsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + residual)


def _agant(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class RedNet(nn.Module):
    def __init__(self, num_classes: int = NUM_CLASSES, depth: int = 50):
        super().__init__()
        if depth not in LAYOUTS:
            raise ValueError(f"RedNet encoder depth must be one of {sorted(LAYOUTS)}, got {depth}")
        rgb, dep = ResNet(depth, 3), ResNet(depth, 1)
        self.conv1, self.bn1, self.relu, self.maxpool = rgb.conv1, rgb.bn1, rgb.relu, rgb.maxpool
        self.layer1, self.layer2, self.layer3, self.layer4 = rgb.layer1, rgb.layer2, rgb.layer3, rgb.layer4
        self.conv1_d, self.bn1_d = dep.conv1, dep.bn1
        self.layer1_d, self.layer2_d, self.layer3_d, self.layer4_d = dep.layer1, dep.layer2, dep.layer3, dep.layer4
        c1, c2, c3, c4 = rgb.channels
        self.agant0 = _agant(64, 64)
        self.agant1 = _agant(c1, 64)
        self.agant2 = _agant(c2, 128)
        self.agant3 = _agant(c3, 256)
        self.agant4 = _agant(c4, 512)
        self.inplanes = 512
        self.deconv1 = self._transpose(256, 6, 2)
        self.deconv2 = self._transpose(128, 4, 2)
        self.deconv3 = self._transpose(64, 3, 2)
        self.deconv4 = self._transpose(64, 3, 2)
        self.final_conv = self._transpose(64, 3)
        self.final_deconv_custom = nn.ConvTranspose2d(64, num_classes, 2, 2, 0, bias=True)
        self.out5_conv_custom = nn.Conv2d(256, num_classes, 1, bias=True)
        self.out4_conv_custom = nn.Conv2d(128, num_classes, 1, bias=True)
        self.out3_conv_custom = nn.Conv2d(64, num_classes, 1, bias=True)
        self.out2_conv_custom = nn.Conv2d(64, num_classes, 1, bias=True)

    def _transpose(self, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        upsample = None
        if stride != 1:
            upsample = nn.Sequential(nn.ConvTranspose2d(self.inplanes, planes, 2, stride, 0, bias=False), nn.BatchNorm2d(planes))
        elif self.inplanes != planes:
            upsample = nn.Sequential(nn.Conv2d(self.inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))
        layers = [TransBasicBlock(self.inplanes, self.inplanes) for _ in range(1, blocks)]
        layers.append(TransBasicBlock(self.inplanes, planes, stride, upsample))
        self.inplanes = planes
        return nn.Sequential(*layers)

    def forward(self, rgb: torch.Tensor, depth: torch.Tensor, deep_supervision: bool = False):
        """rgb (N, 3, H, W) and depth (N, 1, H, W), both normalised -> logits (N, 13, H, W)."""
        x = self.relu(self.bn1(self.conv1(rgb)))
        d = self.relu(self.bn1_d(self.conv1_d(depth)))
        fuse0 = x + d
        x, d = self.maxpool(fuse0), self.maxpool(d)
        x, d = self.layer1(x), self.layer1_d(d)
        fuse1 = x + d
        x, d = self.layer2(fuse1), self.layer2_d(d)
        fuse2 = x + d
        x, d = self.layer3(fuse2), self.layer3_d(d)
        fuse3 = x + d
        x, d = self.layer4(fuse3), self.layer4_d(d)
        fuse4 = x + d
        x = self.deconv1(self.agant4(fuse4))
        out5 = x
        x = x + self.agant3(fuse3)
        x = self.deconv2(x)
        out4 = x
        x = x + self.agant2(fuse2)
        x = self.deconv3(x)
        out3 = x
        x = x + self.agant1(fuse1)
        x = self.deconv4(x)
        out2 = x
        x = x + self.agant0(fuse0)
        logits = self.final_deconv_custom(self.final_conv(x))
        if deep_supervision:
            return logits, [self.out2_conv_custom(out2), self.out3_conv_custom(out3), self.out4_conv_custom(out4), self.out5_conv_custom(out5)]
        return logits


def normalise_inputs(rgb: torch.Tensor, depth: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Official input handling: (N,H,W,3) uint8 RGB and (N,h,w,1) [0,1] depth -> network inputs."""
    d = depth.permute(0, 3, 1, 2).float()
    x = rgb.permute(0, 3, 1, 2).float() / 255.0
    if x.shape[-2:] != d.shape[-2:]:
        x = F.interpolate(x, size=d.shape[-2:], mode="bilinear", align_corners=False)
    mean = torch.tensor(RGB_MEAN, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(RGB_STD, device=x.device).view(1, 3, 1, 1)
    return (x - mean) / std, (d - DEPTH_MEAN) / DEPTH_STD


class RedNetSegmenter:
    """Callable semantics source: (rgb, depth) batches -> uint8 class maps at depth resolution."""

    def __init__(self, model: RedNet, device: str | torch.device = "cpu"):
        self.model = model.to(device).eval()
        self.device = device
        self.load_report = None  # set by models.factory.load_segmenter

    @torch.no_grad()
    def __call__(self, rgb: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
        x, d = normalise_inputs(rgb.to(self.device), depth.to(self.device))
        h, w = d.shape[-2:]
        ph, pw = -h % 32, -w % 32  # the encoder halves the size five times: pad to a multiple of 32
        if ph or pw:
            x = F.pad(x, (0, pw, 0, ph), mode="replicate")
            d = F.pad(d, (0, pw, 0, ph), mode="replicate")
        return self.model(x, d)[..., :h, :w].argmax(dim=1).to(torch.uint8)


def mean_iou(confusion: torch.Tensor) -> tuple[float, torch.Tensor]:
    """mIoU over classes present in the ground truth, and per-class IoU (nan if absent)."""
    confusion = confusion.double()
    tp = confusion.diag()
    union = confusion.sum(0) + confusion.sum(1) - tp
    present = confusion.sum(1) > 0
    iou = torch.where(present, tp / union.clamp(min=1), torch.full_like(tp, float("nan")))
    return float(iou[present].mean()), iou
