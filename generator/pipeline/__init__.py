"""A model over several processing elements (docs/pipeline.md): the plan (plan.py, refine.py,
planning.py), the pipeline's directory (layout.py), the coordinator that streams inputs
through the PEs (coordinator.py, stream.py; remote.py for PEs from an RPC tracker) and the
command (command.py)."""
