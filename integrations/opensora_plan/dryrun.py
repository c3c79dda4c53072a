"""OpenSoraPlan's loaders under the dry run's fake tensors: its transformer, WFVAE and mT5 encoder
built from their config.json alone (pipedit.dryrun.models.fake_loading puts them in place)."""

from __future__ import annotations

from pathlib import Path

import torch

from pipedit.dryrun.models import StubTokenizer, build_fake, fake_module

from .checkpoint import read_json


def fake_transformer(folder, dtype=None, device="cpu"):
    from .transformer import OpenSoraPlanTransformer, TransformerConfig

    config = TransformerConfig.from_dict(read_json(Path(folder) / "config.json"))
    return fake_module(lambda: OpenSoraPlanTransformer(config), dtype or torch.float32)


def fake_wfvae(folder, dtype=None, device="cpu", with_encoder=True):
    from .wfvae import WFVAE, WFVAEConfig

    config = WFVAEConfig.from_dict(read_json(Path(folder) / "config.json"))
    return fake_module(lambda: WFVAE(config, with_encoder), dtype or torch.float32)


def fake_mt5_encoder(folder, dtype, device):
    from transformers import AutoConfig, MT5EncoderModel

    config = AutoConfig.from_pretrained(folder)
    return StubTokenizer(), build_fake(MT5EncoderModel, config, dtype)
