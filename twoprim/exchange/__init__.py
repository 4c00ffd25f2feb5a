"""The exchange between students and the grader: what students hand in, and how the grader takes it in.

intake.py       (grader side) every submission an exchange hands over, on its way into grader/submitted/:
                the exchange's arrival time as the submission time, earlier versions kept, copies flagged
filesystem.py   (grader side) nbgrader's shared-folder exchange, collected without trusting what students
                wrote there: only their own regular files, never a link, a FIFO or another account's file
"""
