"""The check's stages, in order; each module holds rank 0's side (gather, judge, decide)
and the other ranks' side (publish, follow) of one stage."""
