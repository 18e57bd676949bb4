module castslice/bench/packing/artefact_draw

go 1.22
