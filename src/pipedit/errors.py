"""Errors that are the user's to fix. The CLI prints them without a traceback and exits 2;
the serving layer turns them into 4xx responses."""


class UserInputError(ValueError):
    """Bad input: the message says what was wrong and what is allowed."""


class InvalidRequestError(UserInputError):
    """A generation request the model cannot take (size, frame count, steps, prompt)."""


class ModelPathError(UserInputError):
    """A model path that is missing, incomplete or not a supported checkpoint."""


class NonFiniteLatents(InvalidRequestError):
    """The denoised latents hold NaN or infinity: decoding them would write a black video. The
    same request runs into it again (its values, the seed and the weights decide), so it is a
    request error: failed at once, never retried."""

    code = "non_finite_latents"  # the job's error code (the serving layer reads `code`)
