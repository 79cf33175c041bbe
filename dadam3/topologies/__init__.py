"""Topologies beyond :mod:`dadam3.topology`'s: one file each, a builder decorated with
:func:`dadam3.topology.topology`. Every module here is imported with :mod:`dadam3.topology`, so a
new topology is one file (its config ``topology=NAME`` and its schema are made from the registry)."""
