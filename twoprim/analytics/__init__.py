"""What an instructor learns from a graded class (instructor side; never imported by a learner's kernel).

similarity.py      `./course similarity ASSIGNMENT`: who wrote the same code, whole or in part: pairs flagged by
                   their overall similarity or their most similar answers (copydetect's winnowing, each passage
                   weighted by how rare it is in the class), the groups they link, the passages side by side
canonical.py       the form answers are compared in: dead code, counted while loops, reorderings undone
items.py           `./course analysis ASSIGNMENT`: item analysis of every test cell from the gradebook
                   (difficulty, corrected point-biserial discrimination with a bootstrap interval, flags, who
                   passed and lost; blank notebooks apart; a warning for small classes)
misconceptions.py  the causes the checks named in the feedback, per graded function, counted over the class
export.py          `./course export --canvas ASSIGNMENT...`: grades out to Canvas's gradebook CSV (or a plain
                   CSV), from a roster that may be Canvas's own gradebook export; late work and the policy in notes
commands.py        what the three commands print and write
"""
