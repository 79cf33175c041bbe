"""The project's errors, by concern: what the user gave (:mod:`~dadam3.errors.config`: a config
value refused, in the user's keys), files (:mod:`~dadam3.errors.files`: a write or a read that
failed, said in a few words; the errno translated), how a run stops
(:mod:`~dadam3.errors.stops`: the exceptions a run ends with and their exit statuses), and the
entry points' one boundary (:mod:`~dadam3.errors.boundary`), which turns every exception an entry
point ends with (the environment's too: OSError, memory, undecodable data, missing packages) into
ONE line and an exit status. The science raises these too, and every entry point (the
distributed launcher included) ends through the boundary, so they depend on nothing of the
package.
"""
