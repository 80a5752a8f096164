import pytest

from perflab.config import Config, ConfigError


@pytest.mark.parametrize("changes, message", [
    (dict(hidden_sizes=(0,)), "hidden_size must be a positive integer, got 0"),
    (dict(hidden_sizes=()), "at least one hidden layer"),
    (dict(batch_size=-5), "batch_size must be a positive integer, got -5"),
    (dict(batch_size=100, train_size=50), "batch_size B=100 is larger than train_size N=50"),
    (dict(dtype="int8"), "dtype must be one of ('float32', 'float64', 'bfloat16', 'float16'), got 'int8'"),
    (dict(learning_rate=0.0), "learning_rate must be positive, got 0.0"),
    (dict(learning_rate=float("nan")), "learning_rate must be positive"),
    (dict(reg=-1.0), "reg must be zero or positive"),
    (dict(num_epochs=0), "num_epochs must be a positive integer"),
    (dict(test_size=-1), "test_size must be an integer >= 0"),
    (dict(print_every=-2), "print_every must be an integer >= 0"),
    (dict(dataset="cifar"), "dataset must be one of"),
    (dict(input_size=100), "mnist has input_size 784"),
    (dict(train_size=70000), "train_size must be at most 60000 for mnist"),
    (dict(test_size=20000), "test_size must be at most 10000"),
    (dict(num_classes=1, dataset="synthetic"), "num_classes must be at least 2"),
])
def test_bad_values_are_named(changes, message):
    with pytest.raises(ConfigError) as info:
        Config(**changes)
    assert message in str(info.value)


def test_defaults_are_the_seeds_workload():
    c = Config()
    assert (c.input_size, c.hidden_size, c.num_classes, c.reg, c.learning_rate, c.train_size,
            c.num_epochs, c.batch_size) == (784, 512, 10, 1e-4, 1e-4, 38400, 1, 3200)
    assert c.num_batches == 12
    assert Config(train_size=1000, batch_size=300).num_batches == 4
    assert Config(hidden_sizes=1024).layer_sizes == (784, 1024, 10)


def test_fingerprint_tracks_values():
    assert Config().fingerprint() == Config().fingerprint()
    assert Config().fingerprint() != Config(seed=1).fingerprint()


def test_validation_size_checked():
    with pytest.raises(ConfigError, match="validation_size must be an integer >= 0, got -1"):
        Config(validation_size=-1)
    with pytest.raises(ConfigError, match=r"train_size \+ validation_size must be at most 60000 for mnist, got 59000 \+ 2000"):
        Config(train_size=59000, validation_size=2000)
