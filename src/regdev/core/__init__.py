"""The vocabulary every part of regdev speaks: the exception tree, verdicts and observations,
and the escaping of text an untrusted party controls. It imports no other part of regdev."""
