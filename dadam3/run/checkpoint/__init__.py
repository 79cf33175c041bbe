"""Checkpoints, owned here: the files (:mod:`~dadam3.run.checkpoint.files`: path, atomic write,
load), what a training checkpoint holds and how it is split across ranks
(:mod:`~dadam3.run.checkpoint.contents`: kind, node entries), and what may change on resume
(:mod:`~dadam3.run.checkpoint.resume`: the policy is the caller's argument, read from the schema by
the run directory's checks).
"""
from dadam3.run.checkpoint.contents import (RUN_ID_FILE, NodeList, rank_rows, read_run_id, resume_command,
                                            resume_override, stamped, write_checkpoint)
from dadam3.run.checkpoint.files import (CHECKPOINT_DIR, CheckpointNotWritten, atomic_save, checkpoint_path, load,
                                         remove_stray_temporaries, resolve_resume_path)

__all__ = ["CHECKPOINT_DIR", "RUN_ID_FILE", "CheckpointNotWritten", "NodeList", "atomic_save",
           "checkpoint_path", "load", "rank_rows", "read_run_id", "remove_stray_temporaries", "resolve_resume_path",
           "resume_command", "resume_override", "stamped", "write_checkpoint"]
