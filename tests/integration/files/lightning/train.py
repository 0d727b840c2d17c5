"""A PyTorch Lightning script written the usual way: a LightningModule, Trainer(strategy="ddp")
across the job's nodes and ranks, the loss logged with self.log, ModelCheckpoint every 20 steps
into LLMTRAIN_CHECKPOINT_DIR, Lightning's default logger (TensorBoard, as tensorboard is
installed). It prints no progress line of its own."""

import argparse
import os
import time

import pytorch_lightning as pl
import torch


class Regression(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(16, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, prog_bar=True)
        time.sleep(0.2)  # a real model's step takes at least this long
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_steps", type=int, default=60)
    steps = parser.parse_args().max_steps
    torch.manual_seed(0)
    x = torch.randn(4096, 16)
    data = torch.utils.data.TensorDataset(x, x @ torch.randn(16, 1) + 0.1 * torch.randn(4096, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    checkpoints = pl.callbacks.ModelCheckpoint(dirpath=os.environ["LLMTRAIN_CHECKPOINT_DIR"], every_n_train_steps=20,
                                               save_top_k=-1)
    trainer = pl.Trainer(strategy="ddp", accelerator="cpu", num_nodes=int(os.environ["SLURM_NNODES"]),
                         devices=int(os.environ["LOCAL_WORLD_SIZE"]), max_steps=steps, log_every_n_steps=5,
                         callbacks=[checkpoints], enable_model_summary=False)
    trainer.fit(Regression(), loader)


if __name__ == "__main__":
    main()
