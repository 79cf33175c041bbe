"""The project's errors, by concern: what the user gave (:mod:`~dadam3.errors.config`: a config
value refused, in the user's keys), files (:mod:`~dadam3.errors.files`: a path checked before a run
writes, a write or read that failed, said in a few words), and how a run stops
(:mod:`~dadam3.errors.stops`: the exceptions a run ends with and their exit statuses).

Every one is said as ONE line; the entry points' boundary, which turns every exception an entry
point ends with into that line and an exit status, is :mod:`dadam3.run.boundary`. The science
raises these too, so they depend on nothing of the package.
"""
