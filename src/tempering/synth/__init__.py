"""Envs-FORGE: synthesise verified training environments at the policy's learning frontier.

seeds + pass rates -> scoring (six actions, frontier score) -> portfolio (MILP) -> generators (LLM or
built-in mutators) -> static checks -> gold verification in the sandbox -> repair / next-best action.
"""
