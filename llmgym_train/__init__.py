"""llmgym_train: reinforcement learning of LLM policies on llmgym environments."""

__version__ = "0.1.0"
