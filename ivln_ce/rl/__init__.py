"""Reinforcement fine-tuning (seed 000): rewards, returns and advantages, the A2C / PPO trainer
on the rollout engine (``ivln-ce train`` with ``train.trainer=rl``)."""
