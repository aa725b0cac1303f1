"""The step of Study B LoRA's bare reference loop (:func:`.bare.lora_bare` builds it): its micro-batches
(:func:`batch_source`) and the parts of one optimizer step as the product's step timer sees them (:class:`BareStep`).

Torch is imported inside the functions that run the step.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass


def batch_source(s, vocab: int, dev, pinned: bool, rank: int, mirror=None):
    """``fetch()``: one micro-batch ``(input_ids, labels)`` ``[per_device_batch, seq_len]`` on ``dev``, copied from a
    host pool of ``2 x grad_accum`` batches (``mirror``, a :class:`.bare.BareSettings`: ``pinned`` where Trainer pins,
    copied as the result's Trainer copies), else drawn on the device (token ids below ``vocab``, seeded per rank)."""
    import torch

    g = torch.Generator(device=dev).manual_seed(s.seed + rank)
    shape = (s.per_device_batch, s.seq_len)
    pool = []
    if mirror is not None:  # host batches (input_ids, labels: default_data_collator), pinned where Trainer pins
        host_g = torch.Generator().manual_seed(s.seed + rank)
        for _ in range(2 * s.grad_accum):
            ids = torch.randint(0, vocab, shape, generator=host_g)
            pool.append(tuple(t.pin_memory() if pinned else t for t in (ids, ids.clone())))
    non_blocking = mirror is not None and mirror.batch_copy == "non_blocking"
    count = {"batches": 0}

    def fetch():
        """One micro-batch on the device: copied from the host pool (``mirror``), else drawn there."""
        if not pool:
            ids = torch.randint(0, vocab, shape, device=dev, generator=g)
            return ids, ids
        count["batches"] += 1
        return tuple(t.to(dev, non_blocking=non_blocking) for t in pool[count["batches"] % len(pool)])

    return fetch


@dataclass(eq=False)
class BareStep:
    """One optimizer step of the bare loop, in the parts the product's step timer sees (Trainer's on_step_begin to
    on_step_end): :meth:`before` (outside the window), :meth:`body` (the window), :meth:`after` (outside); calling it
    runs the three."""

    net: object  # the model as run (DDP-wrapped and compiled where the result was)
    opt: object  # AdamW on the adapters
    params: list  # the trainable parameters (clipped)
    fetch: object  # () -> (input_ids, labels) on the device (batch_source)
    dev: object  # torch.device of the step
    dtype: object  # autocast dtype (None: no autocast)
    max_norm: float  # gradient clipping when > 0
    world: int
    grad_accum: int
    mirror: object  # the result's .bare.BareSettings (None: eager, no host reads)
    batches: list | None = None  # the step's micro-batches, fetched by before()
    num_items: object = None  # the step's label-token count (float tensor on the device; mirror.num_items_in_batch)
    tr_loss: object = None  # the step's summed loss on the device (mirror only)
    norm: object = None  # the clipped gradients' norm (None: no clipping)
    steps: int = 0  # optimizer steps taken

    def before(self) -> None:
        """Trainer's get_batch_samples, before its step timer starts (on_step_begin): the step's micro-batches
        fetched and copied, and (``mirror.num_items_in_batch``) their label-token count, reduced across ranks where
        the result averaged tokens: Trainer._get_num_items_in_batch, ``sum(labels[..., 1:].ne(-100).sum())`` over the
        micro-batches (the causal LM shifts its labels), on the device, then divided by the tensor/context/sequence
        parallel sizes (1 here), which makes it a float tensor."""
        import torch.distributed as dist

        batches = [self.fetch() for _ in range(self.grad_accum)]  # Trainer fetches a step's micro-batches first
        self.num_items = None
        if self.mirror is not None and self.mirror.num_items_in_batch:
            count = sum(lab[..., 1:].ne(-100).sum() for _, lab in batches)
            if self.mirror.average_tokens and self.world > 1:  # accelerate gathers the ranks' counts and sums them
                dist.all_reduce(count)
            self.num_items = count.to(self.dev) / 1  # Trainer: count / (tp * cp * sp sizes): a float tensor
        self.batches = batches

    def body(self) -> None:
        """What the product's step timer sees: the micro-batches' forward/backward, clipping, the optimizer step.

        Each micro-batch's loss as Trainer's ``compute_loss``/``training_step`` make it: with ``num_items`` (the
        model accepts loss kwargs), ``model(..., num_items_in_batch=num_items).loss`` (the sum over the micro-batch's
        label tokens divided by the step's count), times the world size where tokens are averaged across ranks, not
        divided by ``grad_accum``; without, the micro-batch's mean loss divided by ``grad_accum``."""
        import torch

        if self.batches is None:
            self.before()
        batches, self.batches = self.batches, None
        mirror, num_items = self.mirror, self.num_items
        loss_kwargs = {"num_items_in_batch": num_items} if num_items is not None else {}
        tr_loss = torch.zeros((), device=self.dev) if mirror is not None else None
        for micro, (ids, labels) in enumerate(batches):
            sync = self.world > 1 and micro < self.grad_accum - 1
            ctx = self.net.no_sync() if sync else contextlib.nullcontext()
            with ctx, torch.autocast(self.dev.type, dtype=self.dtype, enabled=self.dtype is not None):
                loss = self.net(input_ids=ids, labels=labels, **loss_kwargs).loss
            if num_items is None:  # training_step: a per-batch mean, divided over the accumulated micro-batches
                loss = loss / self.grad_accum
            elif mirror.average_tokens:  # compute_loss: the count was summed over ranks, DDP averages the gradients
                loss = loss * self.world
            loss.backward()
            if mirror is not None and mirror.nan_inf_filter:  # Trainer's logging_nan_inf_filter: host reads
                bool(torch.isnan(loss.detach()) or torch.isinf(loss.detach()))
            if mirror is not None:  # Trainer adds every micro-batch's loss to its device total
                tr_loss += loss.detach()
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_norm) if self.max_norm > 0 else None
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.steps += 1
        self.tr_loss, self.norm = tr_loss, norm

    def after(self) -> None:
        """Trainer's logging, after its step timer stops (on_step_end): the faithful series' host reads."""
        import torch
        import torch.distributed as dist

        tr_loss, norm, mirror = self.tr_loss, self.norm, self.mirror
        if mirror is not None and mirror.log_every and self.steps % mirror.log_every == 0:
            if self.world > 1:  # Trainer's log: the loss all-gathered over the ranks, its mean read, then the grad norm
                parts = [torch.empty(1, device=self.dev) for _ in range(self.world)]
                dist.all_gather(parts, tr_loss.reshape(1))
                tr_loss = torch.cat(parts).mean()
            tr_loss.item()
            if norm is not None:
                norm.item()

    def __call__(self) -> None:
        """One whole step (fetch, body, logging), for callers that time it as one."""
        self.before()
        self.body()
        self.after()
