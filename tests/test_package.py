import loadrepro


def test_public_names_are_sorted_and_importable():
    assert loadrepro.__all__ == sorted(loadrepro.__all__)
    for name in loadrepro.__all__:
        assert getattr(loadrepro, name) is not None
