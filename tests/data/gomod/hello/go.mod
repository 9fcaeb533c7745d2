module fakedev.local/hello

go 1.26.0
