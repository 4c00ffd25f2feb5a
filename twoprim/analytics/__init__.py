"""What an instructor learns from a graded class (instructor side; never imported by a learner's kernel).

    similarity.py   `./course similarity ASSIGNMENT`: who wrote the same code, pairs ranked by a winnowing
                    library (copydetect), per function and overall, with the matching passages side by side
    items.py        `./course analysis ASSIGNMENT`: item analysis of every test cell from the gradebook
                    (difficulty, corrected point-biserial discrimination, flags for tests that look broken)
    export.py       `./course export --canvas ASSIGNMENT...`: grades out to Canvas's gradebook CSV (or a plain CSV)
    commands.py     what the three commands print and write
"""
