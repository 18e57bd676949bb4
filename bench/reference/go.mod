module github.com/castops/castslice/bench/reference

go 1.22
