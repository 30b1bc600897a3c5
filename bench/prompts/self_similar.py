# A self-similar code prompt for `efim generate --speculative ngram` (README, "Speculative
# decoding"): the continuation repeats patterns the prompt already holds.
import math


class Vector:
    def __init__(self, x, y, z):
        self.x = x
        self.y = y
        self.z = z

    def __add__(self, other):
        return Vector(self.x + other.x, self.y + other.y, self.z + other.z)

    def __sub__(self, other):
        return Vector(self.x - other.x, self.y - other.y, self.z - other.z)

    def __mul__(self, other):
        return Vector(self.x * other.x, self.y * other.y, self.z * other.z)

    def __truediv__(self, other):
        return Vector(self.x / other.x, self.y / other.y, self.z / other.z)

    def __neg__(self):
        return Vector(-self.x, -self.y, -self.z)

    def dot(self, other):
        return self.x * other.x + self.y * other.y + self.z * other.z

    def length(self):
        return math.sqrt(self.dot(self))

    def __repr__(self):
        return f"Vector({self.x}, {self.y}, {self.z})"


class Matrix:
    def __init__(self, rows):
        self.rows = rows

    def __add__(self, other):
